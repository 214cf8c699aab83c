// The router of a mixture-of-experts layer, as the reference computes it (transformers' Qwen3MoeTopKRouter and
// MixtralTopKRouter): softmax over the experts' logits, the top k probabilities, optionally divided by their sum.
// Under expert parallelism every rank routes over all the experts, then maps them to its own slots (toLocalSlots).
// The CPU backend routes with it; the GPU tests check the device's routing against it.

import { localExpertSlot } from '../loader/moe-config.js';
import type { LocalExperts } from '../loader/types.js';
import type { MoeRoute } from './backend.js';

export interface Routing {
  /** [T * topK]: row t's experts, most probable first (ties: the lower expert first). */
  experts: Int32Array;
  /** [T * topK]: their weights (probabilities, renormalized where the route says). */
  weights: Float32Array;
}

/** Routes T rows of logits [T, E] (row-major). Softmax in double, each weight rounded to f32 once. */
export function routeTokens(logits: Float32Array, T: number, E: number, route: MoeRoute): Routing {
  const { topK, renormalize } = route;
  if (!(topK >= 1 && topK <= E)) throw new Error(`routeTokens: top-k ${topK} of ${E} experts`);
  const experts = new Int32Array(T * topK);
  const weights = new Float32Array(T * topK);
  const probs = new Float64Array(E);
  const taken = new Uint8Array(E);
  for (let t = 0; t < T; t++) {
    let max = -Infinity;
    for (let e = 0; e < E; e++) max = Math.max(max, logits[t * E + e]!);
    let sum = 0;
    for (let e = 0; e < E; e++) sum += (probs[e] = Math.exp(logits[t * E + e]! - max));
    taken.fill(0);
    let picked = 0;
    for (let j = 0; j < topK; j++) {
      let best = -1;
      for (let e = 0; e < E; e++) if (!taken[e] && (best < 0 || probs[e]! > probs[best]!)) best = e;
      taken[best] = 1;
      experts[t * topK + j] = best;
      picked += probs[best]!;
    }
    const denom = renormalize ? picked : sum;
    for (let j = 0; j < topK; j++) weights[t * topK + j] = probs[experts[t * topK + j]!]! / denom;
  }
  return { experts, weights };
}

/**
 * Rows routed to each expert: for expert e, the (row, slot) pairs t * topK + j that chose it, ascending. A pair of
 * expert -1 (one this rank does not hold: toLocalSlots) is in no list.
 */
export function pairsByExpert(experts: Int32Array, E: number): Int32Array[] {
  const counts = new Int32Array(E);
  for (const e of experts) if (e >= 0) counts[e]!++;
  const out = Array.from(counts, (n) => new Int32Array(n));
  counts.fill(0);
  experts.forEach((e, pair) => { if (e >= 0) out[e]![counts[e]!++] = pair; });
  return out;
}

/** A routing's global experts as this rank's local slots, -1 for an expert it does not hold (expert parallelism). */
export function toLocalSlots(experts: Int32Array, local: LocalExperts | undefined): Int32Array {
  return local ? experts.map((e) => localExpertSlot(local, e)) : experts;
}
