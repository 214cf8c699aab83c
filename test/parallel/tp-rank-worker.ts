// One tensor-parallel rank of tp-block.test.ts: reads only its slices of the full weights (sharding.ts), runs a
// decoder block's matmuls on them and meets the other ranks through the CPU communicator where a TP model would:
// after the vocab-parallel embedding and each row-parallel projection (all-reduce), and after the vocab-parallel
// lm_head (all-gather).

import { parentPort, workerData } from 'node:worker_threads';
import { CpuCommunicator, type CpuCommGroup } from '../../src/parallel/cpu-comm.js';
import {
  attentionOutParallel, expertParallel, expertParallelShard, expertsDownParallel, expertsGateUpParallel,
  mergedColumnParallel, qkvParallel, readShard, rowParallel, vocabParallel,
} from '../../src/parallel/sharding.js';
import { addInto, gatedSingleKeyAttention, matmulT, siluMulRows } from './tp-math.js';

export interface BlockDims {
  T: number;
  hidden: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  inter: number;
  vocab: number;
  numExperts: number;
  expertInter: number;
}

/** Full (unsharded) weights, row-major [out, in]; experts fused as [E, 2I, H] and [E, H, I]. */
export interface BlockWeights {
  embed: Float32Array;
  qkv: Float32Array;
  o: Float32Array;
  gateUp: Float32Array;
  down: Float32Array;
  expertsGateUp: Float32Array;
  expertsDown: Float32Array;
  /** Each expert's fixed share of the MoE output (the router left out: routing is not what is sharded). */
  expertWeights: Float32Array;
  lmHead: Float32Array;
}

export interface RankData {
  group: CpuCommGroup;
  rank: number;
  dims: BlockDims;
  weights: BlockWeights;
  ids: Int32Array;
  /** Experts split on their width ('tp') or whole across the ranks ('ep'). */
  experts: 'tp' | 'ep';
}

export interface RankResult {
  hidden: Float32Array;
  logits: Float32Array;
}

const { group, rank, dims: d, weights: w, ids, experts } = workerData as RankData;
const tp = group.size;
const comm = new CpuCommunicator(group, rank);
const { T, hidden } = d;

// embedding: the rank's vocab rows; an id outside them contributes zeros to the all-reduce
const vs = vocabParallel(d.vocab, hidden, rank, tp);
const embed = readShard(w.embed, vs);
const h = new Float32Array(T * hidden);
for (let t = 0; t < T; t++) {
  const id = ids[t]!;
  if (id >= vs.vocabStart && id < vs.vocabEnd) h.set(embed.subarray((id - vs.vocabStart) * hidden, (id - vs.vocabStart + 1) * hidden), t * hidden);
}
comm.allReduceSum(h, T * hidden, 'f32');

// attention: column-parallel qkv (q heads split, KV heads split or replicated), row-parallel o
const heads = { numHeads: d.numHeads, numKvHeads: d.numKvHeads, headDim: d.headDim };
const qkv = qkvParallel(heads, hidden, rank, tp);
const qkvOut = matmulT(h, readShard(w.qkv, qkv.fused), T, qkv.fused.shape[0]!, hidden);
const attn = gatedSingleKeyAttention(qkvOut, T, qkv.numLocalHeads, qkv.numLocalKvHeads, d.headDim);
const oShard = attentionOutParallel(heads, hidden, rank, tp);
const o = matmulT(attn, readShard(w.o, oShard), T, hidden, oShard.shape[1]!);
comm.allReduceSum(o, T * hidden, 'f32');
addInto(h, o);

// dense MLP: merged column-parallel gate_up, row-parallel down
const gu = mergedColumnParallel([d.inter, d.inter], hidden, rank, tp);
const Ip = d.inter / tp;
const act = siluMulRows(matmulT(h, readShard(w.gateUp, gu), T, 2 * Ip, hidden), T, Ip);
const mlp = matmulT(act, readShard(w.down, rowParallel(hidden, d.inter, rank, tp)), T, hidden, Ip);
comm.allReduceSum(mlp, T * hidden, 'f32');
addInto(h, mlp);

// experts: every token through every expert, weighted; split on the width or whole experts a rank
const moe = new Float32Array(T * hidden);
const E = d.numExperts;
const I = d.expertInter;
const runExpert = (gateUp: Float32Array, down: Float32Array, width: number, weight: number): void => {
  const a = siluMulRows(matmulT(h, gateUp, T, 2 * width, hidden), T, width);
  const y = matmulT(a, down, T, hidden, width);
  for (let i = 0; i < y.length; i++) moe[i] = moe[i]! + weight * y[i]!;
};
if (experts === 'tp') {
  const gateUps = readShard(w.expertsGateUp, expertsGateUpParallel(E, I, hidden, rank, tp));
  const downs = readShard(w.expertsDown, expertsDownParallel(E, hidden, I, rank, tp));
  const Iep = I / tp;
  for (let e = 0; e < E; e++) {
    runExpert(gateUps.subarray(e * 2 * Iep * hidden, (e + 1) * 2 * Iep * hidden), downs.subarray(e * hidden * Iep, (e + 1) * hidden * Iep),
      Iep, w.expertWeights[e]!);
  }
} else {
  const mine = expertParallel(E, rank, tp);
  const gateUps = readShard(w.expertsGateUp, expertParallelShard(E, 2 * I, hidden, mine));
  const downs = readShard(w.expertsDown, expertParallelShard(E, hidden, I, mine));
  mine.experts.forEach((e, j) => runExpert(gateUps.subarray(j * 2 * I * hidden, (j + 1) * 2 * I * hidden),
    downs.subarray(j * hidden * I, (j + 1) * hidden * I), I, w.expertWeights[e]!));
}
comm.allReduceSum(moe, T * hidden, 'f32');
addInto(h, moe);

// lm_head: vocab-parallel rows (padding rows zero), all-gathered rank-major, padding dropped
const lm = vocabParallel(d.vocab, hidden, rank, tp);
const perRank = lm.shape[0]!;
const part = matmulT(h, readShard(w.lmHead, lm), T, perRank, hidden);
const gathered = new Float32Array(tp * T * perRank);
comm.allGather(part, gathered, T * perRank, 'f32');
const logits = new Float32Array(T * d.vocab);
for (let r = 0; r < tp; r++) {
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < perRank; j++) {
      const id = r * perRank + j;
      if (id < d.vocab) logits[t * d.vocab + id] = gathered[(r * T + t) * perRank + j]!;
    }
  }
}
comm.destroy();
parentPort!.postMessage({ hidden: h, logits } satisfies RankResult);
