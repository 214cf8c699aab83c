// Rotary position embedding: inverse frequencies (default, and Llama 3, linear and YaRN scaling, as
// Hugging Face computes them) and the neox half-split rotation as a reference.

import type { Llama3RopeScaling, ModelConfig, YarnRopeScaling } from '../loader/types.js';

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

/**
 * Hugging Face `_compute_yarn_parameters`: dimensions that turn fewer than beta_slow times over the original
 * context are interpolated (divided by factor), more than beta_fast extrapolated (kept), a linear ramp between.
 */
export function yarnInvFreq(headDim: number, theta: number, s: YarnRopeScaling): Float32Array {
  const fr = Math.fround;
  const half = headDim / 2;
  const correctionDim = (rotations: number): number =>
    (headDim * Math.log(s.originalMaxPositionEmbeddings / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
  let low = correctionDim(s.betaFast);
  let high = correctionDim(s.betaSlow);
  if (s.truncate) [low, high] = [Math.floor(low), Math.ceil(high)];
  low = Math.max(low, 0);
  high = Math.min(high, headDim - 1);
  if (low === high) high += 0.001;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    const posFreq = fr(theta ** fr(fr(2 * i) / headDim));
    const extrapolation = fr(1 / posFreq);
    const interpolation = fr(1 / fr(s.factor * posFreq));
    const ramp = Math.min(1, Math.max(0, fr(fr(i - low) / fr(high - low))));
    const extrapolationFactor = fr(1 - ramp);
    out[i] = fr(fr(interpolation * fr(1 - extrapolationFactor)) + fr(extrapolation * extrapolationFactor));
  }
  return out;
}

export function ropeInvFreq(config: ModelConfig): Float32Array {
  const s = config.ropeScaling;
  if (s?.type === 'yarn') return yarnInvFreq(config.headDim, config.ropeTheta, s);
  const invFreq = defaultInvFreq(config.headDim, config.ropeTheta);
  if (s?.type === 'linear') return invFreq.map((f) => f / s.factor);
  return s ? llama3InvFreq(invFreq, s) : invFreq;
}

/** What the rotated q and k are multiplied by (YaRN's attention factor; 1 otherwise). */
export function ropeAttentionFactor(config: ModelConfig): number {
  return config.ropeScaling?.type === 'yarn' ? config.ropeScaling.attentionFactor : 1;
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

/**
 * The context a model takes when --max-model-len is not given, as vLLM derives it: max_position_embeddings, times
 * the factor of linear scaling; YaRN's original context times its factor (llama3 scaling is in the config already);
 * at most a sliding window (maxModelLenCap).
 */
export function defaultMaxModelLen(config: ModelConfig): number {
  const s = config.ropeScaling;
  const derived = s?.type === 'yarn' ? Math.floor(s.originalMaxPositionEmbeddings * s.factor)
    : s?.type === 'linear' ? Math.floor(config.maxPositionEmbeddings * s.factor) : config.maxPositionEmbeddings;
  return Math.min(derived, maxModelLenCap(config));
}

/** The longest context Quire computes a model exactly: its sliding window (full attention is the same within it). */
export function maxModelLenCap(config: ModelConfig): number {
  return config.slidingWindow ?? Number.POSITIVE_INFINITY;
}
