// Rotary position embedding: inverse frequencies (default and Llama 3 scaling, as
// Hugging Face computes them) and the neox half-split rotation as a reference.

import type { Llama3RopeScaling, ModelConfig } from '../loader/types.js';

/** inv_freq[i] = 1 / theta^(2i / headDim), i < headDim / 2, in f32 like torch. */
export function defaultInvFreq(headDim: number, theta: number): Float32Array {
  const invFreq = new Float32Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    const exponent = Math.fround(Math.fround(2 * i) / headDim);
    invFreq[i] = 1 / Math.fround(theta ** exponent);
  }
  return invFreq;
}

/** Hugging Face `_compute_llama3_parameters`: long wavelengths slowed by `factor`, a smooth band between. */
export function llama3InvFreq(invFreq: Float32Array, s: Llama3RopeScaling): Float32Array {
  const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  const out = new Float32Array(invFreq.length);
  for (let i = 0; i < invFreq.length; i++) {
    const f = invFreq[i]!;
    const wavelen = Math.fround((2 * Math.PI) / f);
    if (wavelen > lowFreqWavelen) {
      out[i] = f / s.factor;
    } else if (wavelen < highFreqWavelen) {
      out[i] = f;
    } else {
      const fr = Math.fround;
      const smooth = fr(fr(fr(s.originalMaxPositionEmbeddings / wavelen) - s.lowFreqFactor)
        / (s.highFreqFactor - s.lowFreqFactor));
      out[i] = fr(fr(fr(fr(1 - smooth) * f) / s.factor) + fr(smooth * f));
    }
  }
  return out;
}

export function ropeInvFreq(config: ModelConfig): Float32Array {
  const invFreq = defaultInvFreq(config.headDim, config.ropeTheta);
  return config.ropeScaling ? llama3InvFreq(invFreq, config.ropeScaling) : invFreq;
}

/** HF `x * cos + rotate_half(x) * sin` for one head at `position`; returns a new array. */
export function rotateHalf(x: Float32Array, position: number, invFreq: Float32Array): Float32Array {
  const half = invFreq.length;
  const out = new Float32Array(2 * half);
  for (let i = 0; i < half; i++) {
    const angle = Math.fround(position * invFreq[i]!);
    const c = Math.cos(angle);
    const s = Math.sin(angle);
    out[i] = x[i]! * c - x[i + half]! * s;
    out[i + half] = x[i + half]! * c + x[i]! * s;
  }
  return out;
}
