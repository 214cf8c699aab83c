// Activations as the GGUF GEMV reads them (kernels/gguf.cu): each token's row of K values in blocks of 32, a block
// kept as int8 q[32], its scale d = max |x| / 127 and the sum s of its q, so x ~ d q (llama.cpp's q8_1, with s an
// exact integer). The GEMV's sums are then integer dot products of q with the weights' packed integers (dp4a), scaled
// once per 16 or 32 values: a step's tokens cost one integer op per 4 weights each, where f32 needs a decode and a
// multiply-add per weight each, and the quantized row is half the bytes the GEMV's lanes re-read per token.
//
// Layout: xq int8 [T][K]; xds [T][K / 32] pairs (d as f32 bits, s). Every producer (gguf.cu's gguf_quantize_q8, the
// norm and silu_mul kernels that also write q8: norm.cu, activation.cu) quantizes through gguf_q8_store8, from the
// bf16 values it wrote, so a row's q8 is the same bits whoever made it. The scalar rules are plain C++ for the host
// test (test/backend/gguf-decode.test.ts), which checks them against the TypeScript model of them.
#pragma once
#include "gguf_decode.cuh"

/** A block's scale from its largest magnitude (0 for a block of zeros): amax / 127, rounded once. */
GGUF_HD float gguf_q8_scale(float amax) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(amax, 127.f);
#else
  return amax / 127.f;
#endif
}

/** x in a block of scale d: x / d rounded once, then to the nearest integer, ties to even (|q| <= 127: x / amax <= 1). */
GGUF_HD int gguf_q8_value(float x, float d) {
  if (d == 0.f) return 0;
#ifdef __CUDA_ARCH__
  return __float2int_rn(__fdiv_rn(x, d));
#else
  return (int)__builtin_nearbyintf(x / d);
#endif
}

#ifdef __CUDACC__
/**
 * Quantizes the 8 consecutive values v of a row this thread holds (bf16-exact: what its producer stored), a q8 block
 * being the 32 values of 4 consecutive lanes (lanes 4i..4i+3 hold its columns in order, the first at a multiple of
 * 32). Every lane of the warp calls it (shuffles); an inactive lane (a group of 4 is all active or all not) passes
 * zeros and writes nothing. xq: this thread's 8 bytes; xds: its block's pair.
 */
__device__ __forceinline__ void gguf_q8_store8(const float v[8], bool active, signed char* xq, int2* xds) {
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < 8; e++) amax = fmaxf(amax, fabsf(v[e]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = gguf_q8_scale(amax);
  unsigned packed[2] = {0u, 0u};
  int s = 0;
#pragma unroll
  for (int e = 0; e < 8; e++) {
    const int q = gguf_q8_value(v[e], d);
    s += q;
    packed[e >> 2] |= ((unsigned)q & 0xffu) << (8 * (e & 3));
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  if (!active) return;
  *reinterpret_cast<uint2*>(xq) = make_uint2(packed[0], packed[1]);
  if ((threadIdx.x & 3) == 0) *xds = make_int2(__float_as_int(d), s);
}
#endif
