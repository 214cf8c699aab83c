// Random sampling from one processed logits row: temperature, min-p, top-k,
// top-p, then an inverse-CDF draw in id order. A few O(vocab) passes; no sort
// of the vocabulary.
//
// Work is in scaled log space, s_i = (l_i - l_max) / T <= 0, weights w_i = e^s_i.
// min-p and top-k are thresholds on s (top-k's is the k-th largest logit, found
// with a size-k heap). top-p bins s over [floor, 0] while the weights are
// computed, walks the bins from the top until the mass reaches p, and sorts
// only the boundary bin's ids (value desc, id asc, as a full sort would).

import type { Rng } from './rng.js';
import { topIds } from './select.js';

/** The truncation a draw applies (a request's SamplingParams carry these). */
export interface TruncationParams {
  temperature: number;
  minP: number;
  topK: number;
  topP: number;
}

/** e^-60 ~ 1e-26 of the top weight: below it a token's share is nil. */
const NEGLIGIBLE_LOG_WEIGHT = -60;
const NUM_BINS = 4096;

export class TokenDrawer {
  private readonly weights: Float64Array;
  private readonly bins: Uint16Array;
  private readonly binMass = new Float64Array(NUM_BINS);

  constructor(readonly vocabSize: number) {
    this.weights = new Float64Array(vocabSize);
    this.bins = new Uint16Array(vocabSize);
  }

  /** row: processed logits (bias, masks, penalties) of width vocabSize; greedy: its argmax. */
  draw(row: Float32Array, greedy: number, params: TruncationParams, rng: Rng): number {
    return this.drawWithUniform(row, greedy, params, rng.nextFloat());
  }

  /** draw() with the uniform in [0, 1) given (the reference of the GPU sampler, which gets it from the host). */
  drawWithUniform(row: Float32Array, greedy: number, params: TruncationParams, uniform: number): number {
    const z = this.truncate(row, greedy, params);
    const w = this.weights;
    const target = uniform * z;
    let cumulative = 0;
    let last = greedy;
    for (let i = 0; i < this.vocabSize; i++) {
      const wi = w[i]!;
      if (wi === 0) continue;
      cumulative += wi;
      last = i;
      if (cumulative > target) return i;
    }
    return last;
  }

  /** The distribution draw() samples from, normalised (a copy). */
  distribution(row: Float32Array, greedy: number, params: TruncationParams): Float64Array {
    const z = this.truncate(row, greedy, params);
    return this.weights.map((wi) => wi / z);
  }

  /** Fills weights (0 = dropped) and returns their sum. */
  private truncate(row: Float32Array, greedy: number, params: TruncationParams): number {
    const vocab = this.vocabSize;
    const w = this.weights;
    const max = row[greedy]!;
    const invT = 1 / params.temperature;
    let floor = NEGLIGIBLE_LOG_WEIGHT;
    // min-p: p_i >= minP * p_max  <=>  s_i >= ln(minP).
    if (params.minP > 0) floor = Math.max(floor, Math.log(params.minP));
    if (params.topK > 0 && params.topK < vocab) {
      const top = topIds(row, 0, vocab, params.topK);
      // Every logit >= the k-th largest stays (ties at the k-th kept, as vLLM).
      if (top.length === params.topK) floor = Math.max(floor, (row[top[top.length - 1]!]! - max) * invT);
    }
    const useBins = params.topP < 1;
    const binScale = floor < -1e-6 ? NUM_BINS / -floor : 0;
    if (useBins) this.binMass.fill(0);
    let z = 0;
    for (let i = 0; i < vocab; i++) {
      const s = (row[i]! - max) * invT;
      if (!(s >= floor)) {
        w[i] = 0;
        continue;
      }
      const wi = Math.exp(s);
      w[i] = wi;
      z += wi;
      if (useBins) {
        const b = Math.min(NUM_BINS - 1, Math.floor((s - floor) * binScale));
        this.bins[i] = b;
        this.binMass[b]! += wi;
      }
    }
    return useBins ? this.cutTopP(row, params.topP * z) : z;
  }

  /**
   * Keeps id j (best first) while the mass before it is < massLimit: bins above
   * the boundary whole, the boundary bin's ids in order (the rest zeroed).
   */
  private cutTopP(row: Float32Array, massLimit: number): number {
    const w = this.weights;
    let b = NUM_BINS - 1;
    let massAbove = 0;
    while (b > 0 && massAbove + this.binMass[b]! < massLimit) massAbove += this.binMass[b--]!;
    const boundary: number[] = [];
    for (let i = 0; i < this.vocabSize; i++) if (w[i] !== 0 && this.bins[i] === b) boundary.push(i);
    boundary.sort((x, y) => row[y]! - row[x]! || x - y);
    let massBefore = massAbove;
    let numKept = 0;
    while (numKept < boundary.length && massBefore < massLimit) massBefore += w[boundary[numKept++]!]!;
    for (let j = numKept; j < boundary.length; j++) w[boundary[j]!] = 0;
    for (let i = 0; i < this.vocabSize; i++) if (this.bins[i]! < b) w[i] = 0;
    return massBefore;
  }
}
