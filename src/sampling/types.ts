// What the sampler gives back besides token ids.

export interface TokenLogprob {
  tokenId: number;
  logprob: number;
  /** Top alternatives, most likely first. */
  top: { tokenId: number; logprob: number }[];
  /** 1 + the number of tokens more likely than tokenId (vLLM's rank); set on prompt logprobs. */
  rank?: number;
}
