// Activations of a block-FP8 linear layer quantized as vLLM's W8A8 (src/model/fp8-linear.ts, the reference):
// per token and group of 128 columns,
//   scale = max(absmax, 1e-10) / 448;   q = e4m3(x / scale)   (IEEE f32 division, round to nearest even, saturated)
// so the GEMM (cuBLASLt, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F on the tokens' side, or moe.cu's _fp8 builds)
// computes the reference's sums.
//
// Shapes: x [numTokens, K] bf16 (or f32: _f32, the MoE's gate_up output before down), K a multiple of 128; q
//   [numTokens, K] e4m3; scales [K / 128, scaleStride] f32, token t's group g at g * scaleStride + t (cuBLASLt's
//   VEC128_32F layout: the outer dimension, tokens, contiguous; scaleStride >= numTokens, the GEMM's padded token count).
// Launch: grid (numTokens, ceil(K / 512)), block 128: a warp a group, a lane 4 consecutive columns.
#include "common.cuh"

// FP8_BLOCK comes from TypeScript (backend/fp8-linear.ts, through kernel-defines.ts); the geometry below is built for
// 128 (a warp of 32 lanes x 4 columns a group; 256 threads over 128 columns x 2 rows a weight block).
static_assert(FP8_BLOCK == 128, "quant_fp8.cu's launch geometry is that of 128-wide FP8 blocks");

/** Four consecutive elements as floats (8 bytes of bf16, 16 of f32: aligned, as a group's lane reads them). */
__device__ __forceinline__ void load4(const bf16_t* p, float v[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const bf16_t* v4 = reinterpret_cast<const bf16_t*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; e++) v[e] = to_float(v4[e]);
}
__device__ __forceinline__ void load4(const float* p, float v[4]) {
  const float4 raw = *reinterpret_cast<const float4*>(p);
  v[0] = raw.x;
  v[1] = raw.y;
  v[2] = raw.z;
  v[3] = raw.w;
}

template <typename T>
__device__ __forceinline__ void quantize_groups(const T* x, unsigned char* q, float* scales, int K, int scaleStride) {
  pdl_begin();
  const int groups = K >> 7;
  const int group = blockIdx.y * 4 + (threadIdx.x >> 5);
  if (group >= groups) return;
  const int lane = threadIdx.x & 31;
  const long long at = (long long)blockIdx.x * K + group * 128 + lane * 4;
  float v[4];
  load4(x + at, v);
  float absmax = 0.f;
#pragma unroll
  for (int e = 0; e < 4; e++) absmax = fmaxf(absmax, fabsf(v[e]));
  for (int o = 16; o > 0; o >>= 1) absmax = fmaxf(absmax, __shfl_xor_sync(FULL_MASK, absmax, o));
  const float scale = __fdiv_rn(fmaxf(absmax, 1e-10f), 448.f);
  unsigned packed = 0;
#pragma unroll
  for (int e = 0; e < 4; e++) packed |= (unsigned)from_float<fp8_t>(__fdiv_rn(v[e], scale)).bits << (8 * e);
  *reinterpret_cast<unsigned*>(q + at) = packed;
  if (lane == 0) scales[(long long)group * scaleStride + blockIdx.x] = scale;
}

extern "C" __global__ void quantize_fp8_groups_bf16(const bf16_t* x, unsigned char* q, float* scales, int K,
                                                    int scaleStride) {
  quantize_groups(x, q, scales, K, scaleStride);
}

extern "C" __global__ void quantize_fp8_groups_f32(const float* x, unsigned char* q, float* scales, int K,
                                                   int scaleStride) {
  quantize_groups(x, q, scales, K, scaleStride);
}

// A bf16 weight [N, K] quantized to block FP8 at load (--quantization fp8), as src/model/fp8-linear.ts's
// quantizeWeightBlocks: per 128 x 128 block, scale = max(absmax, 1e-10) / 448 and q = e4m3(w / scale) (the same
// roundings, so the same bytes). scales [N / 128, scaleStride] f32 (cuBLASLt's layout: rows padded).
// Launch: grid (K / 128, N / 128), block 256 (a thread a column of 64 of the block's rows).
extern "C" __global__ void quantize_weight_blocks_bf16(const bf16_t* w, unsigned char* q, float* scales, int K,
                                                       int scaleStride) {
  __shared__ float warpMax[8];
  const int col = blockIdx.x * 128 + (threadIdx.x & 127);
  const long long row0 = (long long)blockIdx.y * 128 + (threadIdx.x >> 7);
  float absmax = 0.f;
  for (int r = 0; r < 128; r += 2) absmax = fmaxf(absmax, fabsf(to_float(w[(row0 + r) * K + col])));
  for (int o = 16; o > 0; o >>= 1) absmax = fmaxf(absmax, __shfl_xor_sync(FULL_MASK, absmax, o));
  if ((threadIdx.x & 31) == 0) warpMax[threadIdx.x >> 5] = absmax;
  __syncthreads();
  for (int i = 0; i < 8; i++) absmax = fmaxf(absmax, warpMax[i]);
  const float scale = __fdiv_rn(fmaxf(absmax, 1e-10f), 448.f);
  for (int r = 0; r < 128; r += 2) {
    const long long at = (row0 + r) * K + col;
    q[at] = from_float<fp8_t>(__fdiv_rn(to_float(w[at]), scale)).bits;
  }
  if (threadIdx.x == 0) scales[(long long)blockIdx.y * scaleStride + blockIdx.x] = scale;
}
