// Tensor-parallel slicing, as vLLM lays the shards out, as plain arithmetic: for a rank, which elements of a
// checkpoint tensor it reads (so a loader reads only those bytes) and the shape they make. Weights are row-major
// [out, in] (y = x W^T), as Hugging Face stores them.
//
//   column-parallel   W [N, K]: rank r keeps output rows  [r N/tp, (r+1) N/tp)        (q/k/v, gate/up, lm_head)
//   row-parallel      W [N, K]: rank r keeps input columns [r K/tp, (r+1) K/tp)       (o, down); outputs all-reduced
//   merged column     [gate; up] or [q; k; v] fused in one weight: each part split on its own, the rank's parts
//                     concatenated in order, so its fused output is | gate_r | up_r | or | q_r | k_r | v_r |
//   KV heads          numKvHeads >= tp: numKvHeads / tp heads each; numKvHeads < tp: each KV head replicated on
//                     tp / numKvHeads ranks, rank r holding head floor(r / (tp / numKvHeads)) (vLLM's
//                     QKVParallelLinear: shard_rank = tp_rank // num_kv_head_replicas)
//   vocab-parallel    vocab padded up to a multiple of 64 (vLLM's DEFAULT_VOCAB_PADDING_SIZE), then split evenly;
//                     padding rows are zeros at the end of the last ranks, so gathered logits past vocab_size are
//                     dropped and an embedding lookup of an id outside a rank's rows is zero before the all-reduce
//   MoE, tensor-par.  every expert's intermediate dim split: gate/up column-, down row-parallel
//   MoE, expert-par.  whole experts split across ranks (vLLM's "linear" placement: the first E mod ep ranks get one
//                     more), or "round_robin" (expert e on rank e mod ep)

/**
 * `count` runs of `length` consecutive elements of the full tensor (row-major), the first starting at element `start`,
 * each `stride` elements after the one before. Read in order, a Shard's runs are the rank's tensor, row-major.
 */
export interface Runs {
  start: number;
  length: number;
  stride: number;
  count: number;
}

export interface Shard {
  /** The rank's tensor. */
  shape: number[];
  /** What to read of the full tensor, in order. */
  runs: Runs[];
  /** Zeros after the runs (a vocab-parallel rank's padding rows). */
  numPadElements: number;
}

import type { LocalExperts } from '../loader/types.js';

/** vLLM's DEFAULT_VOCAB_PADDING_SIZE. */
export const VOCAB_PADDING = 64;

function checkRank(rank: number, size: number): void {
  if (!Number.isInteger(size) || size < 1) throw new Error(`parallel size ${size} is not a positive integer`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) throw new Error(`rank ${rank} is not in [0, ${size})`);
}

/** [start, end) of rank's even part of `total`; throws naming `what` where size does not divide it. */
export function evenPart(total: number, rank: number, size: number, what = 'dimension'): [number, number] {
  checkRank(rank, size);
  if (total % size !== 0) throw new Error(`${what} ${total} is not divisible by the parallel size ${size}`);
  const part = total / size;
  return [rank * part, (rank + 1) * part];
}

/** Rows [r0, r1) of a [rows, cols] tensor: one run. */
function rowRange(r0: number, r1: number, cols: number): Runs {
  return { start: r0 * cols, length: (r1 - r0) * cols, stride: 0, count: 1 };
}

/** Split output rows: W [rows, cols] -> [rows / tp, cols]. A bias is cols = 1. */
export function columnParallel(rows: number, cols: number, rank: number, tp: number): Shard {
  const [r0, r1] = evenPart(rows, rank, tp, 'output rows');
  return { shape: [r1 - r0, cols], runs: [rowRange(r0, r1, cols)], numPadElements: 0 };
}

/** Split input columns: W [rows, cols] -> [rows, cols / tp]; each rank's product is a partial sum to all-reduce. */
export function rowParallel(rows: number, cols: number, rank: number, tp: number): Shard {
  const [c0, c1] = evenPart(cols, rank, tp, 'input columns');
  return { shape: [rows, c1 - c0], runs: [{ start: c0, length: c1 - c0, stride: cols, count: rows }], numPadElements: 0 };
}

/**
 * A weight of parts stacked by rows ([gate; up], each partRows[i] rows of `cols`), each part column-parallel: the
 * rank's tensor is its slice of part 0, then of part 1, ... Over separate checkpoint tensors, the same slices are
 * columnParallel(partRows[i], ...) of each, concatenated.
 */
export function mergedColumnParallel(partRows: readonly number[], cols: number, rank: number, tp: number): Shard {
  const runs: Runs[] = [];
  let base = 0;
  let rows = 0;
  partRows.forEach((n, i) => {
    const [r0, r1] = evenPart(n, rank, tp, `part ${i}'s output rows`);
    runs.push(rowRange(base + r0, base + r1, cols));
    rows += r1 - r0;
    base += n;
  });
  return { shape: [rows, cols], runs, numPadElements: 0 };
}

export interface AttentionHeads {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

/** The KV heads a rank holds: [start, start + count), and how many ranks hold each (1 unless kv < tp). */
export function kvHeadsOf(numKvHeads: number, rank: number, tp: number): { start: number; count: number; replicas: number } {
  checkRank(rank, tp);
  if (numKvHeads >= tp) {
    const [start, end] = evenPart(numKvHeads, rank, tp, 'num_key_value_heads');
    return { start, count: end - start, replicas: 1 };
  }
  if (tp % numKvHeads !== 0) throw new Error(`num_key_value_heads ${numKvHeads} does not divide the parallel size ${tp}`);
  const replicas = tp / numKvHeads;
  return { start: Math.floor(rank / replicas), count: 1, replicas };
}

export interface QkvShards {
  /** Over q_proj [H D, cols], k_proj and v_proj [KVH D, cols] (cols = 1 for their biases). */
  q: Shard;
  k: Shard;
  v: Shard;
  /** Over a fused qkv_proj [(H + 2 KVH) D, cols] (Phi-3), or q, k, v concatenated as Quire fuses them at load. */
  fused: Shard;
  numLocalHeads: number;
  numLocalKvHeads: number;
  /** The first KV head this rank holds; local q head j uses local KV head floor(j / (numLocalHeads / numLocalKvHeads)). */
  kvHeadStart: number;
  /** Ranks holding each KV head. */
  kvReplicas: number;
}

/** QKVParallelLinear: q heads split evenly, KV heads split or replicated (kvHeadsOf). */
export function qkvParallel(h: AttentionHeads, cols: number, rank: number, tp: number): QkvShards {
  const [q0, q1] = evenPart(h.numHeads, rank, tp, 'num_attention_heads');
  const kv = kvHeadsOf(h.numKvHeads, rank, tp);
  const D = h.headDim;
  const q = rowRange(q0 * D, q1 * D, cols);
  const k = rowRange(kv.start * D, (kv.start + kv.count) * D, cols);
  const qRows = h.numHeads * D;
  const kvRows = h.numKvHeads * D;
  const shift = (r: Runs, rows: number): Runs => ({ ...r, start: r.start + rows * cols });
  const shard = (runs: Runs[], rows: number): Shard => ({ shape: [rows, cols], runs, numPadElements: 0 });
  const localQ = (q1 - q0) * D;
  const localKv = kv.count * D;
  return {
    q: shard([q], localQ),
    k: shard([k], localKv),
    v: shard([k], localKv),
    fused: shard([q, shift(k, qRows), shift(k, qRows + kvRows)], localQ + 2 * localKv),
    numLocalHeads: q1 - q0,
    numLocalKvHeads: kv.count,
    kvHeadStart: kv.start,
    kvReplicas: kv.replicas,
  };
}

/** o_proj [hidden, H D]: row-parallel over the rank's q heads' columns. */
export function attentionOutParallel(h: AttentionHeads, hidden: number, rank: number, tp: number): Shard {
  evenPart(h.numHeads, rank, tp, 'num_attention_heads');
  return rowParallel(hidden, h.numHeads * h.headDim, rank, tp);
}

export interface VocabShard extends Shard {
  /** vocab rounded up to a multiple of VOCAB_PADDING: the rows all ranks hold together. */
  paddedVocab: number;
  /** Token ids [vocabStart, vocabEnd) are this rank's real rows; its rows past them are padding. */
  vocabStart: number;
  vocabEnd: number;
}

export function padVocab(vocab: number, padTo = VOCAB_PADDING): number {
  return Math.ceil(vocab / padTo) * padTo;
}

/** embed_tokens / lm_head [vocab, hidden]: VocabParallelEmbedding's rows for a rank, its padding rows zero. */
export function vocabParallel(vocab: number, hidden: number, rank: number, tp: number): VocabShard {
  const paddedVocab = padVocab(vocab);
  const [p0, p1] = evenPart(paddedVocab, rank, tp, `vocab_size ${vocab} padded to a multiple of ${VOCAB_PADDING}:`);
  const vocabStart = Math.min(p0, vocab);
  const vocabEnd = Math.min(p1, vocab);
  return {
    shape: [p1 - p0, hidden],
    runs: vocabEnd > vocabStart ? [rowRange(vocabStart, vocabEnd, hidden)] : [],
    numPadElements: (p1 - p0 - (vocabEnd - vocabStart)) * hidden,
    paddedVocab, vocabStart, vocabEnd,
  };
}

/**
 * Every expert's gate and up projections, fused as Qwen3.5-MoE stores them (experts.gate_up_proj [E, 2I, H]) or as
 * Backend.MoeExperts stacks them ([E * 2I, H]: expert e's gate rows then its up rows): each expert's gate and up
 * split on I. The rank's tensor: [E, 2 I / tp, H], expert e's gate slice then its up slice.
 */
export function expertsGateUpParallel(numExperts: number, inter: number, hidden: number, rank: number, tp: number): Shard {
  const [i0, i1] = evenPart(inter, rank, tp, 'moe_intermediate_size');
  const runs: Runs[] = [];
  const expertRows = 2 * inter;
  for (let e = 0; e < numExperts; e++) {
    runs.push(rowRange(e * expertRows + i0, e * expertRows + i1, hidden),
      rowRange(e * expertRows + inter + i0, e * expertRows + inter + i1, hidden));
  }
  return { shape: [numExperts, 2 * (i1 - i0), hidden], runs: mergeAdjacent(runs), numPadElements: 0 };
}

/** Every expert's down projection ([E, H, I], or stacked [E * H, I]) split on I: [E, H, I / tp]. */
export function expertsDownParallel(numExperts: number, hidden: number, inter: number, rank: number, tp: number): Shard {
  const [i0, i1] = evenPart(inter, rank, tp, 'moe_intermediate_size');
  return { shape: [numExperts, hidden, i1 - i0], runs: [{ start: i0, length: i1 - i0, stride: inter, count: numExperts * hidden }],
    numPadElements: 0 };
}

export type ExpertPlacement = 'linear' | 'round_robin';

export interface ExpertAssignment {
  /** The global ids of this rank's experts, in local order. */
  experts: number[];
  /** Global expert id -> local index on this rank, or -1 (vLLM's expert_map). */
  globalToLocal: Int32Array;
  /** The same as arithmetic (expert first + j stride in slot j), as the config and the kernels carry it. */
  local: LocalExperts;
}

/** Which whole experts a rank holds under expert parallelism (vLLM's determine_expert_map). */
export function expertParallel(numExperts: number, rank: number, ep: number, placement: ExpertPlacement = 'linear'):
  ExpertAssignment {
  checkRank(rank, ep);
  const base = Math.floor(numExperts / ep);
  const remainder = numExperts % ep;
  const numLocal = base + (rank < remainder ? 1 : 0);
  const first = rank * base + Math.min(rank, remainder);
  const local: LocalExperts = placement === 'linear' ? { first, stride: 1, count: numLocal }
    : { first: rank, stride: ep, count: numLocal };
  const experts = Array.from({ length: numLocal }, (_, j) => local.first + j * local.stride);
  const globalToLocal = new Int32Array(numExperts).fill(-1);
  experts.forEach((e, j) => { globalToLocal[e] = j; });
  return { experts, globalToLocal, local };
}

/** A rank's experts of a stacked [E, expertRows, cols] tensor (one of fused gate_up or down): [numLocal, ...]. */
export function expertParallelShard(numExperts: number, expertRows: number, cols: number, assignment: ExpertAssignment): Shard {
  const per = expertRows * cols;
  const runs = mergeAdjacent(assignment.experts.map((e) => ({ start: e * per, length: per, stride: 0, count: 1 })));
  if (assignment.globalToLocal.length !== numExperts) throw new Error('expert assignment of another expert count');
  return { shape: [assignment.experts.length, expertRows, cols], runs, numPadElements: 0 };
}

/** Joins single runs that follow one another in the full tensor (whole rows of a shard read as one). */
function mergeAdjacent(runs: Runs[]): Runs[] {
  const out: Runs[] = [];
  for (const r of runs) {
    const last = out[out.length - 1];
    if (last && last.count === 1 && r.count === 1 && last.start + last.length === r.start) last.length += r.length;
    else out.push({ ...r });
  }
  return out;
}

export function numShardElements(s: Shard): number {
  return s.runs.reduce((n, r) => n + r.length * r.count, 0) + s.numPadElements;
}

/** The shard's elements read out of the full tensor's, padding zero. */
export function readShard<T extends Float32Array | Uint16Array | Uint8Array | Int32Array>(full: T, s: Shard): T {
  const out = new (full.constructor as new (n: number) => T)(numShardElements(s));
  let at = 0;
  for (const r of s.runs) {
    for (let i = 0; i < r.count; i++) {
      const from = r.start + i * r.stride;
      if (from + r.length > full.length) throw new Error(`shard run [${from}, ${from + r.length}) past the tensor's ${full.length} elements`);
      out.set(full.subarray(from, from + r.length), at);
      at += r.length;
    }
  }
  return out;
}

/**
 * The shard as byte ranges of the full tensor, in order, consecutive ones joined: what WeightSource.readInto reads
 * (offset within the tensor's data). Padding is not included: the caller zeroes the rest.
 */
export function byteRanges(s: Shard, bytesPerElement: number): { offset: number; bytes: number }[] {
  const out: { offset: number; bytes: number }[] = [];
  for (const r of s.runs) {
    for (let i = 0; i < r.count; i++) {
      const offset = (r.start + i * r.stride) * bytesPerElement;
      const bytes = r.length * bytesPerElement;
      const last = out[out.length - 1];
      if (last && last.offset + last.bytes === offset) last.bytes += bytes;
      else out.push({ offset, bytes });
    }
  }
  return out;
}
