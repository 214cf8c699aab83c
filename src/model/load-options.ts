// How an architecture's builder loads a checkpoint (every architecture takes the same options).

/** How a checkpoint's float projections are loaded. */
export interface LoadOptions {
  /**
   * vLLM's --quantization fp8: projections stored in a float dtype are quantized to block FP8 at load (by the backend
   * where it can, quantizeFp8Block; else on the host), and computed W8A8 as a block-FP8 checkpoint's are.
   */
  quantization?: 'fp8' | null;
}
