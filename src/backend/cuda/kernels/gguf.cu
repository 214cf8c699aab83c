// GEMMs on GGUF weights kept as llama.cpp's blocks (gguf-layout.ts: block bodies, and the d of Q4_0, Q8_0 and Q6_K
// blocks in an array of their own), decoded by kernels/gguf_decode.cuh's one decoder a format:
//
//   gguf_gemv_<fmt>_m<M>: y[t, c] = sum_k x[t, k] w[c, k] (+ bias[c]) for the T <= M tokens of a decode step, c < rows of
//     one segment of one format (y and bias already offset to its first column, y's rows ldy apart). A warp a weight
//     row: its lanes take the row's units (a block or a part of one: 16-byte pieces of its body) in turn, decode each
//     once to f32 and multiply it into all T tokens' sums (bf16 activations read 16 bytes at a time, from L1 after the
//     first warp), f32 throughout; the lanes' sums add by shuffles in a fixed order, so a token's result does not
//     depend on T or on the other tokens. Weights are read once for all tokens: memory-bound at small T.
//     launch: grid (ceil(rows / GGUF_GEMV_WARPS)), block GGUF_GEMV_WARPS * 32
//   gguf_dequant_<fmt>: out[r, k] = bf16(w[r, k]) for rows of one segment, a thread a unit (16-byte stores).
//     launch: grid (ceil(rows * K / UNIT / 256)), block 256
//   gguf_copy_columns: dst[t, c] = src[t, c] for src [T, w] into columns of dst (rows ldDst apart).
//     launch: grid (ceil(T * w / 256)), block 256
//
// Larger steps (prompt chunks) dequantize the weight to a bf16 scratch and run the bf16 GEMM on it (cuBLASLt:
// gguf-gemm.ts), not tensor-core tiles decoded in shared memory: the dequantization is one more pass over the weight
// (its blocks read, bf16 written and read back), small beside a chunk's GEMM of hundreds of tokens, and cuBLASLt's
// GEMM is already tuned for every shape. A kernel that decodes tiles into an mma pipeline is the lever left.
#include "common.cuh"
#include "gguf_decode.cuh"

static_assert(GgufQ4_0::UNIT == GGUF_UNIT_Q4_0 && GgufQ8_0::UNIT == GGUF_UNIT_Q8_0 && GgufQ4_K::UNIT == GGUF_UNIT_Q4_K &&
                  GgufQ5_K::UNIT == GGUF_UNIT_Q5_K && GgufQ6_K::UNIT == GGUF_UNIT_Q6_K,
              "gguf-layout.ts's unitElems are the decoders' UNIT");

/** 16 bytes of weights (16-byte aligned), read through the non-coherent cache: they never change. */
__device__ __forceinline__ void gguf_load16(const unsigned char* p, unsigned* w) {
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
}

/** Unit u of a row: its pieces loaded into w, and the decoder's context. */
template <class F>
__device__ __forceinline__ typename F::Ctx gguf_load_unit(const unsigned char* rowBody, const unsigned short* rowScales,
                                                          int u, unsigned w[F::VECS * 4]) {
  constexpr int unitsPerBlock = F::BLOCK / F::UNIT;
  const int b = u / unitsPerBlock, j = u % unitsPerBlock;
  const unsigned char* block = rowBody + (long long)b * F::BODY;
#pragma unroll
  for (int v = 0; v < F::VECS; v++) gguf_load16(block + F::vec_offset(j, v), w + 4 * v);
  const float d = F::HAS_D ? gguf_f16_to_float(rowScales[b]) : 0.f;
  return F::prepare(w, d, j);
}

template <class F, int M>
__device__ __forceinline__ void gguf_gemv(const unsigned char* __restrict__ body, const unsigned short* __restrict__ scales,
                                          const bf16_t* __restrict__ x, bf16_t* __restrict__ y,
                                          const bf16_t* __restrict__ bias, int T, int rows, int K, int ldy) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * GGUF_GEMV_WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int blocksPerRow = K / F::BLOCK;
  const unsigned char* rowBody = body + (long long)row * blocksPerRow * F::BODY;
  const unsigned short* rowScales = F::HAS_D ? scales + (long long)row * blocksPerRow : nullptr;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; m++) acc[m] = 0.f;
  const int units = K / F::UNIT;
  for (int u = lane; u < units; u += 32) {
    unsigned w[F::VECS * 4];
    const typename F::Ctx c = gguf_load_unit<F>(rowBody, rowScales, u, w);
    const bf16_t* xu = x + (long long)u * F::UNIT;
#pragma unroll
    for (int i = 0; i < F::UNIT / 8; i++) {
      float wf[8];
      F::decode8(w, c, i, wf);
#pragma unroll
      for (int m = 0; m < M; m++) {
        if (m >= T) break;
        const uint4 xv = *reinterpret_cast<const uint4*>(xu + (long long)m * K + 8 * i);
        const unsigned xw[4] = {xv.x, xv.y, xv.z, xv.w};
        float s = acc[m];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          s = fmaf(wf[2 * e], __uint_as_float(xw[e] << 16), s);
          s = fmaf(wf[2 * e + 1], __uint_as_float(xw[e] & 0xffff0000u), s);
        }
        acc[m] = s;
      }
    }
  }
  const float b = bias ? to_float(bias[row]) : 0.f;
#pragma unroll
  for (int m = 0; m < M; m++) {
    const float sum = warp_sum(acc[m]);
    if (lane == 0 && m < T) y[(long long)m * ldy + row] = from_float<bf16_t>(sum + b);
  }
}

template <class F>
__device__ __forceinline__ void gguf_dequant(const unsigned char* __restrict__ body,
                                             const unsigned short* __restrict__ scales, bf16_t* __restrict__ out,
                                             int rows, int K) {
  pdl_begin();
  const int units = K / F::UNIT;
  const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= (long long)rows * units) return;
  const int row = (int)(item / units), u = (int)(item % units);
  const int blocksPerRow = K / F::BLOCK;
  unsigned w[F::VECS * 4];
  const typename F::Ctx c = gguf_load_unit<F>(body + (long long)row * blocksPerRow * F::BODY,
                                              F::HAS_D ? scales + (long long)row * blocksPerRow : nullptr, u, w);
  bf16_t* o = out + (long long)row * K + (long long)u * F::UNIT;
#pragma unroll
  for (int i = 0; i < F::UNIT / 8; i++) {
    float wf[8];
    F::decode8(w, c, i, wf);
    unsigned packed[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      packed[e] = (unsigned)from_float<bf16_t>(wf[2 * e]).bits | ((unsigned)from_float<bf16_t>(wf[2 * e + 1]).bits << 16);
    }
    *reinterpret_cast<uint4*>(o + 8 * i) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

#define GGUF_GEMV_ARGS                                                                                            \
  const unsigned char *body, const unsigned short *scales, const bf16_t *x, bf16_t *y, const bf16_t *bias, int T, \
      int rows, int K, int ldy
#define GGUF_GEMV_BUILD(fmt, F, M)                                                                                        \
  extern "C" __global__ void __launch_bounds__(GGUF_GEMV_WARPS * 32) gguf_gemv_##fmt##_m##M(GGUF_GEMV_ARGS) {            \
    gguf_gemv<F, M>(body, scales, x, y, bias, T, rows, K, ldy);                                                          \
  }
#define GGUF_FORMAT(fmt, F)                                                                                              \
  GGUF_GEMV_TOKENS(GGUF_GEMV_BUILD, fmt, F)                                                                              \
  extern "C" __global__ void __launch_bounds__(256)                                                                      \
      gguf_dequant_##fmt(const unsigned char* body, const unsigned short* scales, bf16_t* out, int rows, int K) {      \
    gguf_dequant<F>(body, scales, out, rows, K);                                                                         \
  }
GGUF_FORMAT(q4_0, GgufQ4_0)
GGUF_FORMAT(q8_0, GgufQ8_0)
GGUF_FORMAT(q4_k, GgufQ4_K)
GGUF_FORMAT(q5_k, GgufQ5_K)
GGUF_FORMAT(q6_k, GgufQ6_K)

extern "C" __global__ void __launch_bounds__(256)
    gguf_copy_columns(const bf16_t* __restrict__ src, bf16_t* __restrict__ dst, int T, int width, int ldDst) {
  pdl_begin();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)T * width) return;
  const long long t = i / width, c = i % width;
  dst[t * ldDst + c] = src[i];
}
