// Qwen3-Next's gated DeltaNet input projections as its checkpoints store them, and their rows reordered at load into
// the layout the DeltaNet layer takes (in_proj_qkv, in_proj_z, in_proj_ba of b rows then a rows, as Qwen3.5 stores
// them), so layers/deltanet.ts runs both families unchanged.
//
// Qwen3-Next fuses them per key head (transformers' Qwen3NextGatedDeltaNet.fix_query_key_value_ordering): with r =
// Hv / Hk value heads a key head,
//   in_proj_qkvz [Hk (2 Dk + 2 r Dv), hidden]: for each key head g, its q (Dk rows), its k (Dk), the v of its r value
//                heads g r .. g r + r - 1 (r Dv), their z (r Dv)
//   in_proj_ba   [2 Hv, hidden]: for each key head g, b then a of its r value heads (r rows each)
// The conv1d after the projection runs over q | k | v of all heads (its weight is stored in that order), as Qwen3.5's.

import type { HybridConfig } from '../../loader/types.js';

/** Source rows of in_proj_qkvz and in_proj_ba for each projection the DeltaNet layer takes, in its order. */
export interface InProjOrder {
  /** in_proj_qkvz rows: every key head's q, then every key head's k, then every value head's v. */
  qkv: number[];
  /** in_proj_qkvz rows: every value head's z. */
  z: number[];
  /** in_proj_ba rows: every value head's b, then every value head's a. */
  ba: number[];
}

export function qwen3NextInProjOrder(h: HybridConfig): InProjOrder {
  const [Hk, Dk, Dv] = [h.linearNumKeyHeads, h.linearKeyHeadDim, h.linearValueHeadDim];
  const r = h.linearNumValueHeads / Hk;
  const group = 2 * Dk + 2 * r * Dv;
  const span = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);
  const perKeyHead = (part: (g: number) => number[]): number[] => Array.from({ length: Hk }, (_, g) => part(g)).flat();
  return {
    qkv: [...perKeyHead((g) => span(g * group, Dk)), ...perKeyHead((g) => span(g * group + Dk, Dk)),
      ...perKeyHead((g) => span(g * group + 2 * Dk, r * Dv))],
    z: perKeyHead((g) => span(g * group + 2 * Dk + r * Dv, r * Dv)),
    ba: [...perKeyHead((g) => span(g * 2 * r, r)), ...perKeyHead((g) => span(g * 2 * r + r, r))],
  };
}
