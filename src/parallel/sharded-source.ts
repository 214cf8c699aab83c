// A rank's view of a checkpoint under tensor parallelism: its config (local heads and widths) and a WeightSource
// whose tensors are its shards (sharding.ts's layout), so the architectures' loaders load a shard as they load a
// whole model, unchanged. Column-parallel: q/k/v (KV heads replicated when fewer than the ranks), gate/up, each
// expert's gate/up; row-parallel: o, down, each expert's down (their outputs all-reduced: LayerContext.tp); o's bias
// on rank 0 only (the all-reduce adds it once); embed_tokens and lm_head (tied or not) by vocabulary rows (vLLM's
// VocabParallelEmbedding and ParallelLMHead: each rank reads its part of the vocabulary, the model sums the
// embedding's rows over the ranks and all-gathers the logits). Replicated: norms, routers.
// Hybrid models (Qwen3.5, Qwen3-Next): a rank takes whole heads. Full attention's q_proj (a query and an output-gate
// row block per head) by heads; a gated DeltaNet layer by its key heads and the value heads grouped on them: the
// q, k and v parts of in_proj_qkv and conv1d each split, in_proj_z / b / a and A_log / dt_bias by value heads
// (Qwen3-Next's in_proj_qkvz and in_proj_ba hold their rows grouped per key head already: split as they are),
// out_proj row-parallel; the gated norm's weight (one head's width) replicated. A shared expert splits as a dense
// MLP; its gate (one output) is replicated, and scales every rank's partial output alike.
//
// Qwen3.5-MoE's fused expert tensors (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) split as the
// per-expert ones do: every expert's gate and up rows, and its down columns, on I.
//
// Expert parallelism (vLLM's --enable-expert-parallel; ShardOptions.expertParallel): a rank holds whole experts
// instead, numExperts / tp of them (sharding.ts expertParallel: linear or round-robin), and its config says which
// (MoeConfig.localExperts), so the loaders name only its experts' tensors, whole, and a fused tensor reads only its
// experts' rows. The router is replicated (every rank routes over all the experts); a shared expert still splits on
// its width, as vLLM's does. Attention and dense MLPs split as without it.
//
// A shard is read through WeightSource.readInto where the source has it, byte range by byte range, so a rank reads
// only its slice of each tensor; else the tensor is read whole and sliced.
//
// Not yet sharded (tensorParallelSourceRefusal says so first): block-FP8 checkpoints.

import { BYTES_PER_ELEMENT } from '../loader/dtype.js';
import type { HostTensor, ModelConfig, WeightSource } from '../loader/types.js';
import {
  attentionOutParallel, byteRanges, columnParallel, expertParallel, expertParallelShard, expertsDownParallel,
  expertsGateUpParallel, mergedColumnParallel, numShardElements, qkvParallel, readShard, rowParallel, vocabParallel,
  type ExpertAssignment, type ExpertPlacement, type Shard,
} from './sharding.js';

/** How a model's experts split over the ranks. */
export interface ShardOptions {
  /**
   * Whole experts a rank, placed so (vLLM's --enable-expert-parallel and --expert-placement-strategy); null or absent:
   * every expert split on its width. No effect on a dense model, as in vLLM.
   */
  expertParallel?: ExpertPlacement | null;
}

/** Why this model cannot be split by shardedSource yet, or null. */
export function tensorParallelSourceRefusal(c: ModelConfig): string | null {
  if (c.quantization !== null) return 'tensor parallelism does not split block-FP8 checkpoints yet';
  return null;
}

/** Rank `rank`'s experts of `c` under expert parallelism, or null (not a mixture of experts, or not asked). */
function expertsOf(c: ModelConfig, rank: number, tp: number, opts: ShardOptions): ExpertAssignment | null {
  const placement = opts.expertParallel;
  if (!c.moe || placement == null || tp === 1) return null;
  return expertParallel(c.moe.numExperts, rank, tp, placement);
}

/** The config a rank's layers are built from: its heads, KV heads and MLP widths, and its experts (expert-parallel). */
export function shardedConfig(c: ModelConfig, rank: number, tp: number, opts: ShardOptions = {}): ModelConfig {
  const qkv = qkvParallel(c, 1, rank, tp);
  const shared = c.moe?.sharedExpertIntermediateSize;
  const ep = expertsOf(c, rank, tp, opts);
  return {
    ...c, numHeads: qkv.numLocalHeads, numKvHeads: qkv.numLocalKvHeads, intermediateSize: c.intermediateSize / tp,
    ...(tp > 1 ? { vocabParallel: { size: tp, rows: vocabParallel(c.vocabSize, c.hiddenSize, rank, tp).shape[0]! } } : {}),
    moe: c.moe && { ...c.moe,
      ...(ep ? { localExperts: ep.local } : { expertIntermediateSize: c.moe.expertIntermediateSize / tp }),
      ...(shared != null ? { sharedExpertIntermediateSize: shared / tp } : {}) },
    hybrid: c.hybrid && { ...c.hybrid, linearNumKeyHeads: c.hybrid.linearNumKeyHeads / tp,
      linearNumValueHeads: c.hybrid.linearNumValueHeads / tp },
  };
}

/**
 * How rank `rank` of `tp` reads tensor `name` of the full model `c`, or null: whole (replicated, or one whole expert
 * of its own under expert parallelism: `ep`).
 */
function shardOf(c: ModelConfig, name: string, shape: readonly number[], rank: number, tp: number,
  ep: ExpertAssignment | null): Shard | 'first' | null {
  if (name === 'lm_head.weight' || /^model\.(?:language_model\.)?embed_tokens\.weight$/.test(name)) {
    return vocabParallel(c.vocabSize, shape[1]!, rank, tp);
  }
  const layer = /^(?:model\.)?(?:language_model\.)?layers\.\d+\.(.+)$/.exec(name)?.[1];
  if (layer === undefined) return null;
  // fused experts [E, rows, cols] (no .weight suffix): the rank's experts whole, or every expert's slice of I
  const fused = /^mlp\.experts\.(gate_up_proj|down_proj)$/.exec(layer)?.[1];
  if (fused !== undefined && shape.length === 3) {
    const [E, rows, cols] = shape as [number, number, number];
    if (ep) return expertParallelShard(E, rows, cols, ep);
    return fused === 'gate_up_proj' ? expertsGateUpParallel(E, rows / 2, cols, rank, tp) : expertsDownParallel(E, rows, cols, rank, tp);
  }
  const h = c.hybrid;
  // a DeltaNet layer's per-value-head vectors: no .weight suffix
  if (h && /^linear_attn\.(A_log|dt_bias)$/.test(layer)) return columnParallel(shape[0]!, 1, rank, tp);
  const m = /^(.+)\.(weight|bias)$/.exec(layer);
  if (!m) return null;
  const [module, kind] = [m[1]!, m[2]!];
  const cols = kind === 'bias' ? 1 : shape[1]!;
  if (h) {
    const delta = /^linear_attn\.(in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|in_proj_qkvz|in_proj_ba|conv1d|norm|out_proj)$/.exec(module)?.[1];
    if (delta !== undefined) {
      const keyDim = h.linearNumKeyHeads * h.linearKeyHeadDim;
      const valueDim = h.linearNumValueHeads * h.linearValueHeadDim;
      if (delta === 'norm') return null;
      if (delta === 'out_proj') return rowParallel(shape[0]!, shape[1]!, rank, tp);
      // conv1d [channels, 1, taps]: a row of taps a channel
      if (delta === 'in_proj_qkv' || delta === 'conv1d') {
        return mergedColumnParallel([keyDim, keyDim, valueDim], delta === 'conv1d' ? shape[1]! * shape[2]! : cols, rank, tp);
      }
      return columnParallel(shape[0]!, cols, rank, tp);
    }
    // full attention's q_proj: each head's query rows, then its output-gate rows
    if (module === 'self_attn.q_proj') return columnParallel(shape[0]!, cols, rank, tp);
  }
  const attn = /^self_attn\.(q|k|v|qkv|o)_proj$/.exec(module)?.[1];
  if (attn === 'o') return kind === 'bias' ? 'first' : attentionOutParallel(c, shape[0]!, rank, tp);
  if (attn !== undefined) {
    const s = qkvParallel(c, cols, rank, tp);
    return attn === 'qkv' ? s.fused : s[attn as 'q' | 'k' | 'v'];
  }
  // a dense MLP, or one expert of a mixture (Qwen3-MoE's mlp.experts.E.*, Mixtral's block_sparse_moe.experts.E.w1..3)
  const expert = /^(?:mlp|block_sparse_moe)(\.experts\.\d+|\.shared_expert)?\.(gate_proj|up_proj|gate_up_proj|down_proj|w1|w2|w3)$/.exec(module);
  const proj = expert?.[2];
  if (proj === undefined || kind === 'bias') return null;
  // expert-parallel: a routed expert's tensors whole (the loaders name only the rank's own: MoeConfig.localExperts)
  if (ep && expert![1]?.startsWith('.experts.')) return null;
  if (proj === 'down_proj' || proj === 'w2') return rowParallel(shape[0]!, shape[1]!, rank, tp);
  if (proj === 'gate_up_proj') return mergedColumnParallel([shape[0]! / 2, shape[0]! / 2], shape[1]!, rank, tp);
  return columnParallel(shape[0]!, shape[1]!, rank, tp);
}

/**
 * A shard's shape as the tensor's: a bias [n] stays 1-D (its shard is planned as [n / tp, 1]), a conv weight
 * [channels, 1, taps] 3-D (planned as [channels / tp, taps]).
 */
function shapeOf(s: Shard, full: readonly number[]): number[] {
  if (s.shape.length === 3) return [...s.shape];  // fused experts: [E or the rank's experts, rows, cols]
  if (full.length === 1) return [s.shape[0]!];
  if (full.length === 3) return [s.shape[0]!, full[1]!, full[2]!];
  return [...s.shape];
}

/** Rank `rank` of `tp`'s tensors of `source` (the full model `c`'s checkpoint). */
export function shardedSource(source: WeightSource, c: ModelConfig, rank: number, tp: number, opts: ShardOptions = {}): WeightSource {
  const ep = expertsOf(c, rank, tp, opts);
  const plan = (name: string) => shardOf(c, name, source.info(name).shape, rank, tp, ep);
  return {
    names: () => source.names(),
    has: (name) => source.has(name),
    info: (name) => {
      const info = source.info(name);
      const s = plan(name);
      return s === null || s === 'first' ? info : { ...info, shape: shapeOf(s, info.shape) };
    },
    read: (name): HostTensor => {
      const s = plan(name);
      if (s === null) return source.read(name);
      if (s === 'first') {
        const t = source.read(name);
        return rank === 0 ? t : { ...t, data: new Uint8Array(t.data.length) };
      }
      const info = source.info(name);
      const bpe = BYTES_PER_ELEMENT[info.dtype];
      let data: Uint8Array;
      if (source.readInto) {
        data = new Uint8Array(numShardElements(s) * bpe);
        readRanges(byteRanges(s, bpe), (offset, dest) => source.readInto!(name, offset, dest), data);
      } else {
        // the shard's runs in bytes: one element of a byte array per byte
        const bytes = (n: number) => n * bpe;
        data = readShard(source.read(name).data, { shape: s.shape, numPadElements: bytes(s.numPadElements),
          runs: s.runs.map((r) => ({ start: bytes(r.start), length: bytes(r.length), stride: bytes(r.stride), count: r.count })) });
      }
      return { name, dtype: info.dtype, shape: shapeOf(s, info.shape), data };
    },
  };
}

/** Ranges under this size, this near each other, are read as one span. */
const SPAN_SLACK_BYTES = 1 << 16;
const SPAN_MAX_BYTES = 64 << 20;

/**
 * Reads byte ranges (ascending, not overlapping) into `out`, one after another, joining nearby ranges into one read of
 * their span and copying the ranges out of it. A column split's shard is one range a row: a Qwen3-MoE expert's
 * down_proj at -tp 2 is 2048 ranges of 768 bytes, each a file open and read, which loaded the 30B-A3B model at
 * ~0.36 GiB/s a rank (session 35); its span is twice the bytes in one read. Ranges of 64 KiB or more, or more than
 * 64 KiB apart, are read alone.
 */
export function readRanges(ranges: readonly { offset: number; bytes: number }[],
  read: (offset: number, dest: Uint8Array) => void, out: Uint8Array): void {
  let at = 0;
  for (let i = 0; i < ranges.length;) {
    const first = ranges[i]!;
    let j = i + 1;
    for (; j < ranges.length; j++) {
      const [prev, r] = [ranges[j - 1]!, ranges[j]!];
      const span = r.offset + r.bytes - first.offset;
      // a large range is one efficient read already (an expert's whole slab: never read beside another's)
      if (prev.bytes >= SPAN_SLACK_BYTES || r.bytes >= SPAN_SLACK_BYTES || r.offset - (prev.offset + prev.bytes) > SPAN_SLACK_BYTES ||
        span > SPAN_MAX_BYTES) break;
    }
    if (j === i + 1) {
      read(first.offset, out.subarray(at, at + first.bytes));
      at += first.bytes;
    } else {
      const last = ranges[j - 1]!;
      const span = new Uint8Array(last.offset + last.bytes - first.offset);
      read(first.offset, span);
      for (let k = i; k < j; k++) {
        const r = ranges[k]!;
        out.set(span.subarray(r.offset - first.offset, r.offset - first.offset + r.bytes), at);
        at += r.bytes;
      }
    }
    i = j;
  }
}
