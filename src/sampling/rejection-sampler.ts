// Verification of proposed (draft) tokens against the target model's distribution, as vLLM's RejectionSampler
// does it for a draft method without draft probabilities (n-gram): the draft distribution is a point mass on the
// proposed token, so draft token d is accepted with probability min(1, p(d) / 1) = p(d); on rejection the token
// comes from the residual max(p - q, 0) renormalised, which is p with d removed and renormalised. Accepted
// tokens, then the recovered (or, after k acceptances, the bonus) token are distributed exactly as p, position by
// position. Greedy rows accept while the draft equals the target's argmax, so their transcript is the one
// without speculation.

import type { Rng } from '../backend/sampling/rng.js';

/** Whether draft token `draft` is kept under the target distribution `probs` (normalised), using one uniform. */
export function acceptDraft(probs: Float64Array, draft: number, rng: Rng): boolean {
  const p = draft >= 0 && draft < probs.length ? probs[draft]! : 0;
  return p > 0 && rng.nextFloat() < p;
}

/**
 * A token from `probs` with `draft` removed and the rest renormalised (the residual of a point-mass draft); one
 * uniform, inverse CDF in id order. Where nothing else has mass (cannot follow a rejection) the draft itself.
 */
export function sampleRecovered(probs: Float64Array, draft: number, rng: Rng): number {
  let z = 0;
  for (let i = 0; i < probs.length; i++) if (i !== draft) z += probs[i]!;
  if (!(z > 0)) return draft;
  const target = rng.nextFloat() * z;
  let cumulative = 0;
  let last = draft;
  for (let i = 0; i < probs.length; i++) {
    const p = probs[i]!;
    if (i === draft || p === 0) continue;
    cumulative += p;
    last = i;
    if (cumulative > target) return i;
  }
  return last;
}
