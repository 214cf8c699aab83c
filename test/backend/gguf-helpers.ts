// GGUF blocks for the tests of the device path: random bytes in every field (every nibble, high bit and 6-bit scale
// occurs), with each f16 scale made finite, so dequantize() gives finite values to compare with.

import { GGML_TYPES } from '../../src/loader/gguf-quants.js';
import type { GgufBlockType } from '../../src/loader/types.js';
import { seededRandom } from '../../src/model/random-weights.js';

/** Byte offsets of a block's f16 fields (d, and Q4_K / Q5_K's dmin). */
const F16_FIELDS: Record<GgufBlockType, number[]> = { Q4_0: [0], Q8_0: [0], Q4_K: [0, 2], Q5_K: [0, 2], Q6_K: [208] };

/**
 * `rows` rows of K values of `type` as GGUF blocks. `maxScale` bounds each f16 field (d, dmin) so the values stay of
 * a weight's size; they may be negative and subnormal.
 */
export function randomGgufBlocks(type: GgufBlockType, rows: number, K: number, seed: number, maxScale = 0.01): Uint8Array {
  const { blockElems, blockBytes } = GGML_TYPES[type];
  const numBlocks = rows * (K / blockElems);
  const rand = seededRandom(seed);
  const data = Uint8Array.from({ length: numBlocks * blockBytes }, () => Math.floor(rand() * 256));
  const view = new DataView(data.buffer);
  for (let b = 0; b < numBlocks; b++) {
    for (const at of F16_FIELDS[type]) {
      // an f16 of magnitude below maxScale: sign, exponent and mantissa random under that bound
      const magnitude = rand() * maxScale;
      const bits = f16Bits(rand() < 0.1 ? magnitude * 1e-4 : magnitude) | (rand() < 0.5 ? 0x8000 : 0);
      view.setUint16(b * blockBytes + at, bits, true);
    }
  }
  return data;
}

/** x (>= 0, below 65504) as f16 bits, truncated. */
function f16Bits(x: number): number {
  if (x < 2 ** -14) return Math.floor(x / 2 ** -24);
  const e = Math.floor(Math.log2(x));
  return ((e + 15) << 10) | Math.min(1023, Math.max(0, Math.floor((x / 2 ** e - 1) * 1024)));
}
