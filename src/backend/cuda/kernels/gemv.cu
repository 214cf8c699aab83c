// y[M, N] = x[M, K] w[N, K]^T for small M (decode batches of 1..8 rows): a warp
// per output column n streams w's row n once with 16-byte loads (four in flight
// per lane) and applies it to all M rows of x, fp32 accumulation, then a warp
// reduction. Each row m's arithmetic (chunk order, shuffle tree) does not depend
// on M, so a row's result is the same bits alone or in a batch of up to 8.
// Requires K % 8 == 0 and 16-byte aligned rows (bf16). Launch: grid ceil(N / GEMV_WARPS), block 32 GEMV_WARPS.
#include "common.cuh"

#define GEMV_WARPS 8
#define GEMV_UNROLL 4

__device__ __forceinline__ void unpack8(const uint4 v, float* f) {
  f[0] = __uint_as_float(v.x << 16);
  f[1] = __uint_as_float(v.x & 0xffff0000u);
  f[2] = __uint_as_float(v.y << 16);
  f[3] = __uint_as_float(v.y & 0xffff0000u);
  f[4] = __uint_as_float(v.z << 16);
  f[5] = __uint_as_float(v.z & 0xffff0000u);
  f[6] = __uint_as_float(v.w << 16);
  f[7] = __uint_as_float(v.w & 0xffff0000u);
}

template <int M>
__device__ __forceinline__ void gemv(const bf16_t* x, const bf16_t* w, bf16_t* y, int N, int K) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = blockIdx.x * GEMV_WARPS + warp;
  if (n >= N) return;
  const uint4* wRow = reinterpret_cast<const uint4*>(w + (long long)n * K);
  const int numChunks = K / 8;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; m++) acc[m] = 0.f;
  for (int c0 = lane; c0 < numChunks; c0 += 32 * GEMV_UNROLL) {
    uint4 wv[GEMV_UNROLL];
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
      const int c = c0 + 32 * u;
      wv[u] = c < numChunks ? __ldg(wRow + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
      const int c = c0 + 32 * u;
      if (c >= numChunks) break;
      float wf[8];
      unpack8(wv[u], wf);
#pragma unroll
      for (int m = 0; m < M; m++) {
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + (long long)m * K) + c), xf);
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < 8; e++) s += wf[e] * xf[e];
        acc[m] += s;
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; m++) acc[m] = warp_sum(acc[m]);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; m++) y[(long long)m * N + n] = from_float<bf16_t>(acc[m]);
  }
}

#define INSTANTIATE(M)                                                                                     \
  extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                                            \
      gemv_bf16_m##M(const bf16_t* x, const bf16_t* w, bf16_t* y, int N, int K) {                          \
    gemv<M>(x, w, y, N, K);                                                                                \
  }

INSTANTIATE(1)
INSTANTIATE(2)
INSTANTIATE(3)
INSTANTIATE(4)
INSTANTIATE(5)
INSTANTIATE(6)
INSTANTIATE(7)
INSTANTIATE(8)
