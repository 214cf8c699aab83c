// Prompt lookup (vLLM's NgramProposer): the longest suffix n-gram of a request's tokens (n from promptLookupMax
// down to promptLookupMin) that occurs earlier in its prompt and output proposes the k tokens that followed that
// earlier occurrence. Among equally long matches the earliest occurrence wins, as vLLM's KMP scan picks it. No
// model runs: proposals are free, and a wrong one costs only the positions it took in the verify step.

export interface NgramProposerOptions {
  promptLookupMin: number;
  promptLookupMax: number;
}

/** Up to k tokens proposed to follow `tokens` (empty: no suffix n-gram of the allowed lengths recurs). */
export function proposeNgram(tokens: readonly number[], k: number, o: NgramProposerOptions): number[] {
  const total = tokens.length;
  if (k <= 0 || total < o.promptLookupMin) return [];
  for (let n = Math.min(o.promptLookupMax, total - 1); n >= o.promptLookupMin; n--) {
    const suffix = total - n;
    // an occurrence that starts at `start` ends before the suffix's last token (so something follows it)
    for (let start = 0; start + n < total; start++) {
      let j = 0;
      while (j < n && tokens[start + j] === tokens[suffix + j]) j++;
      if (j < n) continue;
      const from = start + n;
      return tokens.slice(from, Math.min(total, from + k));
    }
  }
  return [];
}
