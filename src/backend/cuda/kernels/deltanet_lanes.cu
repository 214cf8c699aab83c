// deltanet_recurrent_lanes (QUIRE_DELTANET_LANES; launched by backend/cuda/deltanet.ts for the wide build's
// sequences): deltanet_wide.cuh's loads with a lane holding all DK rows of its column, so a block is one warp on 32
// columns: no barrier, no partials in shared memory, and one warp (not PARTS) norming a token's q and k for
// those columns. Why: at 160 rows the wide build moved 2.87 TB/s of f32 state and bf16 states (half the bytes) gained
// it 10% (session 47, bench-deltanet): past the loads, its per-token work bounds it. A lane adds its column's PARTS
// partials itself, each summed as deltanet_recurrent's lane sums its rows (the m[4], o[4] chains over rows
// part + PARTS i), then pairs and pairs of pairs as the butterfly: deltanet_recurrent's bits (the deltanet GPU test).
// DK floats of state a lane, in registers (ptxas: no spills at DK 128). A file of its own: compiled (by NVRTC, at
// first use) only where the knob is on.
//
// grid (S, Hv, ceil(Dv / 32)), block 32 threads.
#include "deltanet_common.cuh"

template <typename T, typename ST, int DK>
__device__ __forceinline__ void deltanet_recurrent_lanes(const T* conv, const T* ba, int ldba, const T* aLog,
                                                         const T* dtBias, T* out, float* state, const int* qsl,
                                                         const int* seqLens, const int* slots, int Hk, int Hv, int Dv,
                                                         int slotFloats, int ssmAt, int maxTokens) {
  constexpr int PARTS = DK / 32;
  __shared__ float qks[2 * DK];  // the token's q and k, as deltanet_recurrent's qs and ks
  pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  if (!DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  const int s = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.z * 32 + lane;
  const int kh = h / (Hv / Hk);
  const int C = 2 * Hk * DK + Hv * Dv;
  const int start = qsl[s], end = qsl[s + 1];
  if (start == end || end - start > maxTokens) return;  // longer ones: the step's deltanet_recurrent launch
  const int pos0 = seqLens[s] - (end - start);
  ST* S = head_state<ST, DK>(state, slots[s], slotFloats, ssmAt, h, Dv);
  float* qs = qks;
  float* ks = qks + DK;
  float col[DK];  // rows 0 .. DK - 1 of column j
  const bool read = S != nullptr && pos0 > 0 && j < Dv;
#pragma unroll
  for (int r = 0; r < DK; r++) col[r] = read ? to_float(S[(long long)r * Dv + j]) : 0.f;
  const float A = -expf(to_float(aLog[h]));
  const float bias = to_float(dtBias[h]);
  const float qScale = __fdiv_rn(1.f, sqrtf((float)DK));
  if (DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  TokenIn<DK> next;
  load_token<T, DK, false>(conv, ba, ldba, start, C, Hk, Hv, Dv, kh, h, j, next);
  for (int t = start; t < end; t++) {
    const TokenIn<DK> in = next;
    if (t + 1 < end) load_token<T, DK, false>(conv, ba, ldba, t + 1, C, Hk, Hv, Dv, kh, h, j, next);
    // rule_token's arithmetic, its PARTS lanes' work in one lane
    float decay, beta;
    token_gates<DK>(in, qs, ks, A, bias, qScale, decay, beta);
    float parts[PARTS];
#pragma unroll
    for (int p = 0; p < PARTS; p++) {
      float m[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 32; i++) {
        const int r = p + PARTS * i;
        col[r] = __fmul_rn(col[r], decay);
        m[i & 3] = fmaf(col[r], ks[r], m[i & 3]);
      }
      parts[p] = (m[0] + m[1]) + (m[2] + m[3]);
      __syncwarp();  // fences (here and below) the compiler keeps: a part's 32 rows of ks loaded at a time, not DK
    }
    const float delta = __fmul_rn(in.v - lane_parts_sum<PARTS>(parts), beta);
#pragma unroll
    for (int p = 0; p < PARTS; p++) {
      float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 32; i++) {
        const int r = p + PARTS * i;
        col[r] = fmaf(ks[r], delta, col[r]);
        o[i & 3] = fmaf(col[r], qs[r], o[i & 3]);
      }
      parts[p] = (o[0] + o[1]) + (o[2] + o[3]);
      __syncwarp();
    }
    const float outJ = lane_parts_sum<PARTS>(parts);
    if (j < Dv) out[(long long)t * Hv * Dv + (long long)h * Dv + j] = from_float<T>(outJ);
  }
  if (S == nullptr || j >= Dv) return;
#pragma unroll
  for (int r = 0; r < DK; r++) S[(long long)r * Dv + j] = from_float<ST>(col[r]);
}

// DELTANET_KEY_DIMS(X, s, T): from TypeScript (kernel-defines.ts)
#define INSTANTIATE_LANES_ST(suffix, T, DK, ss, ST)                                                              \
  extern "C" __global__ void __launch_bounds__(32) deltanet_recurrent_lanes_##suffix##_##DK##ss(                  \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out, float* state,               \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,   \
      int maxTokens) {                                                                                           \
    deltanet_recurrent_lanes<T, ST, DK>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv,   \
                                        Dv, slotFloats, ssmAt, maxTokens);                                       \
  }
#define INSTANTIATE_LANES(suffix, T, DK)       \
  INSTANTIATE_LANES_ST(suffix, T, DK, , float) \
  INSTANTIATE_LANES_ST(suffix, T, DK, _sbf16, bf16_t)

DELTANET_KEY_DIMS(INSTANTIATE_LANES, bf16, bf16_t)
#undef INSTANTIATE_LANES
#undef INSTANTIATE_LANES_ST
