// The flat batch: one forward pass over every scheduled token of every running
// sequence, prefill chunks and decode tokens together.
//
//   tokens:        | seq0 chunk (q0 tokens) | seq1 (1 token) | seq2 chunk ... |
//   queryStartLoc: 0 ........................ q0 ............ q0+1 ......... numTokens
//
// Sequence i attends to kv positions [0, seqLens[i]) read through its block
// table; its new tokens sit at positions seqLens[i]-q_i .. seqLens[i]-1 and are
// written to the cache at slotMapping (slot = page * blockSize + offset) before
// attention runs.

export interface ForwardBatch {
  numTokens: number;
  numSeqs: number;
  /**
   * [numTokens] token ids. -(r + 1) stands for the token the previous step sampled for its logits row r
   * (async scheduling: a step is scheduled before the host has the tokens of the step before it); the
   * backend reads it where sampleTokens left it, on the device.
   */
  inputIds: Int32Array;
  /** [numTokens] absolute position of each token in its sequence. */
  positions: Int32Array;
  /** [numTokens] KV slot each token's k/v is written to; -1 skips the write. */
  slotMapping: Int32Array;
  /** [numSeqs + 1] cumulative query lengths (cu_seqlens_q). */
  queryStartLoc: Int32Array;
  /** [numSeqs] kv length of each sequence after this step (cached + new). */
  seqLens: Int32Array;
  /** [numSeqs * maxBlocksPerSeq] page ids, row-major; unused entries are 0. */
  blockTables: Int32Array;
  maxBlocksPerSeq: number;
  /** Rows of the flat batch whose logits are wanted (usually each sequence's last token). */
  logitsIndices: Int32Array;
  /**
   * [numSeqs] each sequence's recurrent-state slot (hybrid models' linear-attention layers; RecurrentStateLayout),
   * -1 for none (padding rows: computed from a zero state, nothing kept). A sequence whose chunk starts at position 0
   * starts from a zero state. Absent on models without recurrent layers.
   */
  stateSlots?: Int32Array;
  /**
   * [numTokens] each token's row of the hidden states the forward before kept (Backend.carry: an MTP head's input
   * beside its token); absent on every other step.
   */
  carryRows?: Int32Array;
  /** How Backend.sampleTokens picks each logits row's token; absent: every row greedy. */
  sampling?: RowSampling;
  /**
   * A speculative-decoding verify step: its rows of several tokens are a request's last token and its proposals. A
   * backend may attend each of their tokens as a row of its own, as one-token rows (CUDA: the decode kernel, whose
   * kv splits spread a few rows over every SM, where the prefill kernel's tiles would give one block a head).
   */
  verify?: boolean;
}

/** Per logits row (see src/sampling/device-sampling.ts and kernels/sample.cu). */
export interface RowSampling {
  /** <= 0: greedy (argmax, ties to the lowest id). */
  temperature: Float32Array;
  /** <= 0 or >= vocab: off. */
  topK: Int32Array;
  /** 1: off. */
  topP: Float32Array;
  /** 0: off. */
  minP: Float32Array;
  /** In [0, 1), from the request's RNG; unused by greedy rows. */
  uniform: Float32Array;
}

/** Layout of the paged KV cache, shared by every backend. */
export interface KvCacheSpec {
  numBlocks: number;
  blockSize: number;
  numLayers: number;
  numKvHeads: number;
  headDim: number;
}
