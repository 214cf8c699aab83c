// Gated DeltaNet on prompt chunks, CHUNK tokens at a time (32 or 64: QUIRE_DELTANET_CHUNK; launched by
// backend/cuda/deltanet.ts for the sequences of at least QUIRE_DELTANET_CHUNKED_FROM tokens).
//
// Why: the recurrent builds walk a sequence's tokens one after another. On qwen3.5-27b (session 47, H200) a lone
// 512-token chunk took 0.69 ms a layer (1.35 us a token): a long prompt's rule costs about as much as its GEMMs, and
// each mixed step that admits a prompt pays it. Within a chunk the rule unrolls into sums over the chunk's tokens
// (as FLA's chunk_gated_delta_rule), which the block's threads share; only a sequence's chunks follow one another.
//
// A chunk of n tokens, S the state before it (Dk x Dv), cl the cumulative log decay within the chunk, g = exp(cl):
//   R_t = beta_t (v_t - g_t S^T k_t)
//   D_t = R_t - sum_{i<t} beta_t exp(cl_t - cl_i) (k_t . k_i) D_i        (forward substitution over t < n)
//   o_t = g_t S^T q_t + sum_{i<=t} exp(cl_t - cl_i) (q_t . k_i) D_i
//   S'  = g_{n-1} S + sum_i exp(cl_{n-1} - cl_i) k_i D_i^T
// q and k are l2-normed (q also scaled by 1 / sqrt(Dk)), the decay and beta computed, as rule_token does. That is the
// recurrence summed in another order: outputs within rounding of deltanet_recurrent's, not its bits (the deltanet GPU
// test compares it with the CPU). Chunks start at the step's first token of each sequence. f32 on CUDA cores: a
// first build, for the latency of long chunks; its products could move to tensor cores.
//
// grid (S, Hv, ceil(Dv / 32)), block CHUNK_THREADS; dynamic shared memory ChunkLayout<DK, CHUNK>::FLOATS floats
// (125,440 bytes at Dk 128 and 64 tokens: a block a SM; 62,976 at 32 tokens: three). Sequences of fewer than
// minTokens tokens are left to the other builds' launches. A file of its own: compiled (by NVRTC, at first use) only
// where QUIRE_DELTANET_CHUNKED_FROM is set.

#include "deltanet_common.cuh"

// DELTANET_KEY_DIMS(X, s, T), DELTANET_CHUNK_THREADS, DELTANET_CHUNKS(X, s, T, DK, ss, ST) (the chunk sizes built),
// DELTANET_CHUNKED_BYTES(dk, c): from TypeScript (kernel-defines.ts, whose shared bytes the launch gives)
constexpr int CHUNK_THREADS = DELTANET_CHUNK_THREADS;
constexpr int CHUNK_WARPS = CHUNK_THREADS / 32;

/**
 * Offsets (floats) of the shared arrays; row strides one more than a row, so a column's reads hit 32 banks.
 * kernel-defines.ts deltanetChunkedSharedBytes is FLOATS * 4.
 */
template <int DK, int CHUNK>
struct ChunkLayout {
  static constexpr int QK_LD = DK + 1;  // qs, ks: [CHUNK][DK]
  static constexpr int TT_LD = CHUNK + 1;  // kk, qk: [CHUNK][CHUNK]
  static constexpr int COL_LD = 33;  // st: [DK][32] (the block's 32 columns of the state), d: [CHUNK][32]
  static constexpr int QS = 0;
  static constexpr int KS = QS + CHUNK * QK_LD;
  static constexpr int KK = KS + CHUNK * QK_LD;
  static constexpr int QKM = KK + CHUNK * TT_LD;
  static constexpr int ST = QKM + CHUNK * TT_LD;
  static constexpr int D = ST + DK * COL_LD;
  static constexpr int CL = D + CHUNK * COL_LD;  // cumulative log decay
  static constexpr int BETA = CL + CHUNK;
  static constexpr int W = BETA + CHUNK;  // the state update's exp(cl_{n-1} - cl_i)
  static constexpr int FLOATS = W + CHUNK;
};

template <typename T, typename ST, int DK, int CHUNK>
__device__ __forceinline__ void deltanet_chunked(const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias,
                                                 T* out, float* state, const int* qsl, const int* seqLens,
                                                 const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,
                                                 int minTokens) {
  using L = ChunkLayout<DK, CHUNK>;
  static_assert(L::FLOATS * 4 == DELTANET_CHUNKED_BYTES(DK, CHUNK), "kernel-defines.ts deltanetChunkedSharedBytes");
  static_assert(CHUNK * 32 % CHUNK_THREADS == 0, "a thread's (token, column) pairs");
  DYNAMIC_SHARED(float, sh);
  float *qs = sh + L::QS, *ks = sh + L::KS, *kk = sh + L::KK, *qk = sh + L::QKM, *st = sh + L::ST, *d = sh + L::D;
  float *cl = sh + L::CL, *betas = sh + L::BETA, *w = sh + L::W;
  pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  const int s = blockIdx.x, h = blockIdx.y, j0 = blockIdx.z * 32;
  const int start = qsl[s], end = qsl[s + 1];
  if (end - start < minTokens || start == end) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kh = h / (Hv / Hk);
  const int C = 2 * Hk * DK + Hv * Dv;
  const int pos0 = seqLens[s] - (end - start);
  ST* S = head_state<ST, DK>(state, slots[s], slotFloats, ssmAt, h, Dv);
  // the block's 32 columns of the state (zeros without one, from position 0, or past Dv)
  for (int e = tid; e < DK * 32; e += CHUNK_THREADS) {
    const int row = e >> 5, col = e & 31;
    st[row * L::COL_LD + col] = S != nullptr && pos0 > 0 && j0 + col < Dv
      ? to_float(S[(long long)row * Dv + j0 + col]) : 0.f;
  }
  const float A = -expf(to_float(aLog[h]));
  const float bias = to_float(dtBias[h]);
  const float qScale = __fdiv_rn(1.f, sqrtf((float)DK));
  for (int c0 = start; c0 < end; c0 += CHUNK) {
    const int n = min(CHUNK, end - c0);
    // 1. a warp a token: q and k l2-normed as rule_token norms them, the log decay and beta; v's 32 columns into d
    for (int i = warp; i < n; i += CHUNK_WARPS) {
      const T* row = conv + (long long)(c0 + i) * C;
      float q[DK / 32], k[DK / 32];
#pragma unroll
      for (int u = 0; u < DK / 32; u++) {
        q[u] = to_float(row[kh * DK + lane + 32 * u]);
        k[u] = to_float(row[(Hk + kh) * DK + lane + 32 * u]);
      }
      const float qInv = l2_inv<DK>(q), kInv = l2_inv<DK>(k);
#pragma unroll
      for (int u = 0; u < DK / 32; u++) {
        qs[i * L::QK_LD + lane + 32 * u] = __fmul_rn(__fmul_rn(q[u], qInv), qScale);
        ks[i * L::QK_LD + lane + 32 * u] = __fmul_rn(k[u], kInv);
      }
      d[i * L::COL_LD + lane] = j0 + lane < Dv ? to_float(row[2 * Hk * DK + h * Dv + j0 + lane]) : 0.f;
      if (lane == 0) {
        const long long at = (long long)(c0 + i) * ldba;
        cl[i] = A * softplus(to_float(ba[at + Hv + h]) + bias);  // log of the decay
        betas[i] = 1.f / (1.f + expf(-to_float(ba[at + h])));
      }
    }
    __syncthreads();
    if (tid == 0) {
      for (int i = 1; i < n; i++) cl[i] += cl[i - 1];
    }
    __syncthreads();
    // 2. kk[t][i] = beta_t exp(cl_t - cl_i) k_t . k_i (i < t), qk[t][i] = exp(cl_t - cl_i) q_t . k_i (i <= t); the
    // state update's weights (dot products in 4 partial sums: chains a quarter as long)
    if (tid < n) w[tid] = expf(cl[n - 1] - cl[tid]);
    for (int e = tid; e < n * n; e += CHUNK_THREADS) {
      const int t = e / n, i = e - t * n;
      if (i > t) continue;
      const float* kt = ks + t * L::QK_LD;
      const float* qt = qs + t * L::QK_LD;
      const float* ki = ks + i * L::QK_LD;
      float dk[4] = {0.f, 0.f, 0.f, 0.f}, dq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
      for (int x = 0; x < DK; x++) {
        dk[x & 3] = fmaf(kt[x], ki[x], dk[x & 3]);
        dq[x & 3] = fmaf(qt[x], ki[x], dq[x & 3]);
      }
      const float decay = expf(cl[t] - cl[i]);
      kk[t * L::TT_LD + i] = i < t ? betas[t] * decay * ((dk[0] + dk[1]) + (dk[2] + dk[3])) : 0.f;
      qk[t * L::TT_LD + i] = decay * ((dq[0] + dq[1]) + (dq[2] + dq[3]));
    }
    // 3. R_t = beta_t (v_t - g_t S^T k_t) in d, and o_t's first term g_t S^T q_t kept for step 5 (a thread's
    // (t, column) pairs are the same in both)
    constexpr int PER_THREAD = CHUNK * 32 / CHUNK_THREADS;
    float o[PER_THREAD];
#pragma unroll
    for (int r = 0; r < PER_THREAD; r++) {
      const int e = tid + r * CHUNK_THREADS, t = e >> 5, col = e & 31;
      o[r] = 0.f;
      if (t >= n) continue;
      float sk[4] = {0.f, 0.f, 0.f, 0.f}, sq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
      for (int x = 0; x < DK; x++) {
        const float sv = st[x * L::COL_LD + col];
        sk[x & 3] = fmaf(ks[t * L::QK_LD + x], sv, sk[x & 3]);
        sq[x & 3] = fmaf(qs[t * L::QK_LD + x], sv, sq[x & 3]);
      }
      const float g = expf(cl[t]);
      d[t * L::COL_LD + col] = betas[t] * (d[t * L::COL_LD + col] - g * ((sk[0] + sk[1]) + (sk[2] + sk[3])));
      o[r] = g * ((sq[0] + sq[1]) + (sq[2] + sq[3]));
    }
    __syncthreads();
    // 4. D by forward substitution, a column a lane: rows in blocks of CHUNK_WARPS, a warp a row taking off the rows
    // of the blocks before, then warp 0 the block's own triangle
    for (int b0 = 0; b0 < n; b0 += CHUNK_WARPS) {
      const int t = b0 + warp;
      if (t < n) {
        float acc = d[t * L::COL_LD + lane];
        for (int i = 0; i < b0; i++) acc = fmaf(-kk[t * L::TT_LD + i], d[i * L::COL_LD + lane], acc);
        d[t * L::COL_LD + lane] = acc;
      }
      __syncthreads();
      if (warp == 0) {
        for (int u = b0 + 1; u < min(b0 + CHUNK_WARPS, n); u++) {
          float acc = d[u * L::COL_LD + lane];
          for (int i = b0; i < u; i++) acc = fmaf(-kk[u * L::TT_LD + i], d[i * L::COL_LD + lane], acc);
          d[u * L::COL_LD + lane] = acc;
        }
      }
      __syncthreads();
    }
    // 5. the outputs, and the state moved past the chunk (each reads d; neither reads what the other writes)
#pragma unroll
    for (int r = 0; r < PER_THREAD; r++) {
      const int e = tid + r * CHUNK_THREADS, t = e >> 5, col = e & 31;
      if (t >= n) continue;
      float acc = o[r];
      for (int i = 0; i <= t; i++) acc = fmaf(qk[t * L::TT_LD + i], d[i * L::COL_LD + col], acc);
      if (j0 + col < Dv) out[(long long)(c0 + t) * Hv * Dv + (long long)h * Dv + j0 + col] = from_float<T>(acc);
    }
    const float gLast = expf(cl[n - 1]);
    for (int e = tid; e < DK * 32; e += CHUNK_THREADS) {
      const int x = e >> 5, col = e & 31;
      float acc = gLast * st[x * L::COL_LD + col];
      for (int i = 0; i < n; i++) acc = fmaf(w[i] * ks[i * L::QK_LD + x], d[i * L::COL_LD + col], acc);
      st[x * L::COL_LD + col] = acc;
    }
    __syncthreads();
  }
  if (S == nullptr) return;
  for (int e = tid; e < DK * 32; e += CHUNK_THREADS) {
    const int row = e >> 5, col = e & 31;
    if (j0 + col < Dv) S[(long long)row * Dv + j0 + col] = from_float<ST>(st[row * L::COL_LD + col]);
  }
}

#define INSTANTIATE_CHUNKED(suffix, T, DK, ss, ST, C)                                                            \
  extern "C" __global__ void __launch_bounds__(CHUNK_THREADS) deltanet_chunked##C##_##suffix##_##DK##ss(        \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out, float* state,               \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,   \
      int minTokens) {                                                                                           \
    deltanet_chunked<T, ST, DK, C>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv, Dv,    \
                                   slotFloats, ssmAt, minTokens);                                                \
  }
#define INSTANTIATE_CHUNKED_DK(suffix, T, DK)                                \
  DELTANET_CHUNKS(INSTANTIATE_CHUNKED, suffix, T, DK, , float)               \
  DELTANET_CHUNKS(INSTANTIATE_CHUNKED, suffix, T, DK, _sbf16, bf16_t)

DELTANET_KEY_DIMS(INSTANTIATE_CHUNKED_DK, bf16, bf16_t)
#undef INSTANTIATE_CHUNKED_DK
#undef INSTANTIATE_CHUNKED
