// The sampling arithmetic a device computes (kernels/sample.cu) in plain TypeScript: the CPU backend's
// sampleTokens and rowLogprobs, and what the host Sampler shares with them (greedy threshold, raw logprobs).

import type { RowSampling } from '../batch.js';
import { TokenDrawer } from './draw.js';
import { argmax, logSumExp, topIds } from './select.js';

/** Below this temperature a row is greedy. */
export const GREEDY_TEMPERATURE = 1e-5;

/** Raw log-softmax of logits row [base, base + vocab): any id's logprob, and the numTop most likely (value desc, id asc). */
export function rawLogprobs(logits: Float32Array, base: number, vocab: number, numTop: number) {
  const { logZ } = logSumExp(logits, base, vocab);
  const logprobOf = (id: number) => logits[base + id]! - logZ;
  const top = Array.from(topIds(logits, base, vocab, numTop), (id) => ({ tokenId: id, logprob: logprobOf(id) }));
  return { logprobOf, top };
}

/** The reference of kernels/sample.cu: logits [numRows * vocab] -> one token per row. */
export function sampleRowsReference(logits: Float32Array, vocab: number, numRows: number,
  sampling: RowSampling | undefined, drawer = new TokenDrawer(vocab)): Int32Array {
  const out = new Int32Array(numRows);
  for (let r = 0; r < numRows; r++) {
    const row = logits.subarray(r * vocab, (r + 1) * vocab);
    const greedy = Math.max(argmax(row, 0, vocab), 0);
    const temperature = sampling?.temperature[r] ?? 0;
    if (!(temperature > 0) || !(row[greedy]! > -Infinity)) {
      out[r] = greedy;
      continue;
    }
    out[r] = drawer.drawWithUniform(row, greedy, {
      temperature, topK: sampling!.topK[r]!, topP: sampling!.topP[r]!, minP: sampling!.minP[r]!,
    }, sampling!.uniform[r]!);
  }
  return out;
}

/**
 * The reference of kernels/sample.cu's row_logprobs (prompt logprobs): token targets[i] under logits row i (raw
 * log-softmax, log-sum-exp in double), packed per row as [logprob (f32 bits), rank (1 + the ids of a larger logit),
 * then numTop (id, logprob (f32 bits)) pairs, value desc, id asc].
 */
export function rowLogprobsReference(logits: Float32Array, vocab: number, targets: Int32Array, numTop: number): Int32Array {
  const width = 2 + 2 * numTop;
  const out = new Int32Array(targets.length * width);
  const f = new Float32Array(out.buffer);
  targets.forEach((target, r) => {
    const base = r * vocab;
    const raw = rawLogprobs(logits, base, vocab, numTop);
    const x = logits[base + target]!;
    let rank = 1;
    for (let i = 0; i < vocab; i++) if (logits[base + i]! > x) rank++;
    f[r * width] = raw.logprobOf(target);
    out[r * width + 1] = rank;
    raw.top.forEach((t, j) => {
      out[r * width + 2 + 2 * j] = t.tokenId;
      f[r * width + 3 + 2 * j] = t.logprob;
    });
  });
  return out;
}
