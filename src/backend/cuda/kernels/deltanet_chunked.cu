// Gated DeltaNet on prompt chunks, CHUNK tokens at a time (32 or 64: QUIRE_DELTANET_CHUNK; launched by
// backend/cuda/deltanet.ts for the sequences of at least QUIRE_DELTANET_CHUNKED_FROM tokens; not in batch-invariant
// mode).
//
// Why: the recurrent builds walk a sequence's tokens one after another. On qwen3.5-27b (session 47, H200) a lone
// 512-token chunk took 0.69 ms a layer (1.35 us a token): a long prompt's rule costs about as much as its GEMMs, and
// each mixed step that admits a prompt pays it. Within a chunk the rule unrolls into sums over the chunk's tokens
// (as FLA's chunk_gated_delta_rule), which the block's threads share; only a sequence's chunks follow one another.
// Session 48 (H200, chunks of 32, the default): that chunk 0.386 ms, 4,096 tokens 2.98 against the recurrence's 6.15.
//
// A chunk of n tokens, S the state before it (Dk x Dv), cl the cumulative log decay within the chunk, g = exp(cl):
//   R_t = beta_t (v_t - g_t S^T k_t)
//   D_t = R_t - sum_{i<t} beta_t exp(cl_t - cl_i) (k_t . k_i) D_i        (forward substitution over t < n)
//   o_t = g_t S^T q_t + sum_{i<=t} exp(cl_t - cl_i) (q_t . k_i) D_i
//   S'  = g_{n-1} S + sum_i exp(cl_{n-1} - cl_i) k_i D_i^T
// q and k are l2-normed (q also scaled by 1 / sqrt(Dk)), the decay and beta computed, as rule_token does. That is the
// recurrence summed in another order: outputs within rounding of deltanet_recurrent's, not its bits (the deltanet GPU
// test compares it with the CPU). Chunks start at the step's first token of each sequence. f32 on CUDA cores, each
// product a register tile a thread; or (the _mma build, QUIRE_DELTANET_CHUNKED_MMA) q.k, k.k, S^T k, S^T q and the
// state update on tensor cores, 95% of the FMAs: bf16 mma.sync with f32 sums, on q and k as they came (bf16 values,
// so exact products; their norms applied after), the state and the update's w kn D each split into two bf16 parts
// (hi + lo within 2^-17 of it).
//
// grid (S, Hv, ceil(Dv / 32)), block CHUNK_THREADS; dynamic shared memory ChunkLayout<DK, CHUNK>::FLOATS floats
// (132,864 bytes at Dk 128 and 64 tokens: a block a SM; 69,504 at 32 tokens: three, registers permitting: below).
// Sequences of fewer than minTokens tokens are left to the other builds' launches. A file of its own: compiled (by
// NVRTC, at first use) only where QUIRE_DELTANET_CHUNKED_FROM is set (by default: from 64 tokens).

#include "deltanet_common.cuh"
#include "mma.cuh"

// DELTANET_KEY_DIMS(X, s, T), DELTANET_CHUNK_THREADS, DELTANET_CHUNKS(X, s, T, DK, ss, ST) (the chunk sizes built),
// DELTANET_CHUNKED_BYTES(dk, c): from TypeScript (kernel-defines.ts, whose shared bytes the launch gives)
constexpr int CHUNK_THREADS = DELTANET_CHUNK_THREADS;
// Blocks a SM the chunks-of-32 build is compiled for: left to ptxas (1) it takes 140 registers at Dk 128 (nvcc 13.0,
// sm_90), so one block a SM though shared memory holds three; 2 caps it at 128 (127), 3 at 85 (79), neither spilling.
// The same instructions, so the same bits. 1 until an in-engine A/B (QUIRE_KERNEL_DEFINES=
// DELTANET_CHUNKED32_MIN_BLOCKS=3).
#ifndef DELTANET_CHUNKED32_MIN_BLOCKS
#define DELTANET_CHUNKED32_MIN_BLOCKS 1
#endif
constexpr int CHUNK_WARPS = CHUNK_THREADS / 32;

/**
 * Offsets (floats) of the shared arrays. q and k transposed ([DK][CHUNK]: a token's run of a row is one vector load),
 * every row a multiple of 4 floats long so that rows start 16-byte aligned (float4 loads); a row 4 floats past its
 * data so that consecutive rows start 4 banks apart. kernel-defines.ts deltanetChunkedSharedBytes is FLOATS * 4.
 */
template <int DK, int CHUNK, bool MMA>
struct ChunkLayout {
  static constexpr int T_LD = CHUNK + 4;  // qt, kt: [DK][CHUNK]; kk, qk: [CHUNK][CHUNK]
  static constexpr int COL_LD = 36;  // st: [DK][32] (the block's 32 columns of the state), d: [CHUNK][32]
  static constexpr int QT_FLOATS = MMA ? 0 : DK * T_LD;  // (the tensor-core build keeps q and k as bf16 below)
  static constexpr int QT = 0;
  static constexpr int KT = QT + QT_FLOATS;
  static constexpr int KK = KT + QT_FLOATS;
  static constexpr int QKM = KK + CHUNK * T_LD;
  static constexpr int ST = QKM + CHUNK * T_LD;
  static constexpr int D = ST + DK * COL_LD;
  static constexpr int CL = D + CHUNK * COL_LD;  // cumulative log decay
  static constexpr int BETA = CL + CHUNK;
  static constexpr int W = BETA + CHUNK;  // the state update's exp(cl_{n-1} - cl_i)
  static constexpr int PLAIN = W + CHUNK;
  // the tensor-core build's (MMA) instead of qt and kt: q and k as they came, bf16 [CHUNK][R_LD]; the block's state
  // columns split into two bf16 parts, [32][R_LD] each (a row 16 bytes past its data: ldmatrix's 8 rows fall in 8
  // bank groups); the norms' factors; g_t S^T q_t [CHUNK][COL_LD]. kernel-defines.ts deltanetChunkedSharedBytes(...,
  // true).
  static constexpr int R_LD = DK + 8;
  static constexpr int D_LD = CHUNK + 8;
  static constexpr int QR = PLAIN;
  static constexpr int KR = QR + CHUNK * R_LD / 2;
  static constexpr int SHI = KR + CHUNK * R_LD / 2;
  static constexpr int SLO = SHI + 32 * R_LD / 2;
  // the state update's B, w_i kn_i D[i][col] in two bf16 parts ([32][D_LD] each), in shi's and slo's place: those are
  // read in step 3 only, these written after step 4
  static constexpr int DHI = SHI;
  static constexpr int DLO = DHI + 32 * D_LD / 2;
  static constexpr int QN = SHI + 32 * (R_LD > D_LD ? R_LD : D_LD);
  static constexpr int KN = QN + CHUNK;
  static constexpr int OS = KN + CHUNK;
  static constexpr int FLOATS = MMA ? OS + CHUNK * COL_LD : PLAIN;
};

/**
 * The tensor-core build's A (rows m0.., k x..x+31: two m16n8k16 k-steps) from a bf16 [rows][R_LD] array, and B (rows
 * n0..n0+7 of a bf16 [n][R_LD] array: the same k) for those two k-steps: ldmatrix x4 each (kernels/mma.cuh).
 */
template <int R_LD>
__device__ __forceinline__ void mma_tile_k32(float c[4], const unsigned short* a, int m0, const unsigned short* b,
                                             int n0, int x, int lane) {
  const int mi = lane >> 3, r = lane & 7;
  unsigned a0[4], a1[4], bb[4];
  const unsigned short* arow = a + (m0 + r + (mi & 1) * 8) * R_LD + x + (mi >> 1) * 8;
  ldmatrix_x4(a0, arow);
  ldmatrix_x4(a1, arow + 16);
  ldmatrix_x4(bb, b + (n0 + r) * R_LD + x + mi * 8);
  mma_bf16_16816(c, a0, bb[0], bb[1]);
  mma_bf16_16816(c, a1, bb[2], bb[3]);
}

/**
 * mma_tile_k32 with A the transpose of a bf16 [k][R_LD] array (A's rows m0.. are its columns, k i..i+31 its rows:
 * ldmatrix .trans) and B rows n0..n0+7 of a bf16 [n][B_LD] array.
 */
template <int R_LD, int B_LD>
__device__ __forceinline__ void mma_tile_k32_at(float c[4], const unsigned short* a, int m0, const unsigned short* b,
                                                int n0, int i, int lane) {
  const int mi = lane >> 3, r = lane & 7;
  unsigned a0[4], a1[4], bb[4];
  const unsigned short* acol = a + (i + r + (mi >> 1) * 8) * R_LD + m0 + (mi & 1) * 8;
  ldmatrix_x4_trans(a0, acol);
  ldmatrix_x4_trans(a1, acol + 16 * R_LD);
  ldmatrix_x4(bb, b + (n0 + r) * B_LD + i + mi * 8);
  mma_bf16_16816(c, a0, bb[0], bb[1]);
  mma_bf16_16816(c, a1, bb[2], bb[3]);
}

/** N consecutive floats of shared memory into registers, in one load where N is 2 or 4 (p aligned to N floats). */
template <int N>
__device__ __forceinline__ void lds(float* r, const float* p) {
  if constexpr (N == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
  } else if constexpr (N == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    r[0] = v.x, r[1] = v.y;
  } else {
#pragma unroll
    for (int a = 0; a < N; a++) r[a] = p[a];
  }
}

template <typename T, typename ST, int DK, int CHUNK, bool MMA>
__device__ __forceinline__ void deltanet_chunked(const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias,
                                                 T* out, float* state, const int* qsl, const int* seqLens,
                                                 const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,
                                                 int minTokens) {
  using L = ChunkLayout<DK, CHUNK, MMA>;
  static_assert(L::FLOATS * 4 == (MMA ? DELTANET_CHUNKED_MMA_BYTES(DK, CHUNK) : DELTANET_CHUNKED_BYTES(DK, CHUNK)),
                "kernel-defines.ts deltanetChunkedSharedBytes");
  static_assert(CHUNK_THREADS == 256 && (CHUNK == 32 || CHUNK == 64) && DK % 32 == 0, "the tiles below");
  // Each product a register tile a thread (why: as a dot product a thread, session 48 timed this kernel bound by its
  // shared-memory loads, three to two FMAs): the token-by-token products TI x TI (16 x 16 tiles), S^T k and S^T q
  // TS x 4 columns (32 x 8), the state update XS x 4 columns (32 x 8)
  constexpr int TI = CHUNK / 16, TS = CHUNK / 32, XS = DK / 32;
  DYNAMIC_SHARED(float, sh);
  float *qt = sh + L::QT, *kt = sh + L::KT, *kk = sh + L::KK, *qk = sh + L::QKM, *st = sh + L::ST, *d = sh + L::D;
  float *cl = sh + L::CL, *betas = sh + L::BETA, *w = sh + L::W;
  unsigned short* qr = reinterpret_cast<unsigned short*>(sh + L::QR);
  unsigned short* kr = reinterpret_cast<unsigned short*>(sh + L::KR);
  unsigned short* shi = reinterpret_cast<unsigned short*>(sh + L::SHI);
  unsigned short* slo = reinterpret_cast<unsigned short*>(sh + L::SLO);
  unsigned short* dhi = reinterpret_cast<unsigned short*>(sh + L::DHI);
  unsigned short* dlo = reinterpret_cast<unsigned short*>(sh + L::DLO);
  float *qn = sh + L::QN, *kn = sh + L::KN, *os = sh + L::OS;
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
  // the tiles' corners
  const int i2 = (tid & 15) * TI, t2 = (tid >> 4) * TI;  // kk, qk
  const int c4 = (tid & 7) * 4, t3 = (tid >> 3) * TS, x5 = (tid >> 3) * XS;  // S^T k, S^T q, outputs; the update
  for (int c0 = start; c0 < end; c0 += CHUNK) {
    const int n = min(CHUNK, end - c0);
    // 1. a warp a token: q and k l2-normed as rule_token norms them, the log decay and beta; v's 32 columns into d.
    // A partial chunk's rows past n are zeros (and its decays and betas), so every product below stays finite. A
    // warp's tokens' loads all issued first (why: one after another, each token waited out a global load's latency).
    constexpr int PER_WARP = CHUNK / CHUNK_WARPS;
    float q[PER_WARP][DK / 32], k[PER_WARP][DK / 32], v[PER_WARP], ga[PER_WARP], gb[PER_WARP];
#pragma unroll
    for (int r = 0; r < PER_WARP; r++) {
      const int i = warp + r * CHUNK_WARPS;
      const bool in = i < n;
      const T* row = conv + (long long)(c0 + (in ? i : 0)) * C;
#pragma unroll
      for (int u = 0; u < DK / 32; u++) {
        q[r][u] = in ? to_float(row[kh * DK + lane + 32 * u]) : 0.f;
        k[r][u] = in ? to_float(row[(Hk + kh) * DK + lane + 32 * u]) : 0.f;
      }
      v[r] = in && j0 + lane < Dv ? to_float(row[2 * Hk * DK + h * Dv + j0 + lane]) : 0.f;
      const long long at = (long long)(c0 + (in ? i : 0)) * ldba;
      ga[r] = in && lane == 0 ? to_float(ba[at + Hv + h]) : 0.f;
      gb[r] = in && lane == 0 ? to_float(ba[at + h]) : 0.f;
    }
#pragma unroll
    for (int r = 0; r < PER_WARP; r++) {
      const int i = warp + r * CHUNK_WARPS;
      const bool in = i < n;
      const float qInv = in ? l2_inv<DK>(q[r]) : 0.f, kInv = in ? l2_inv<DK>(k[r]) : 0.f;
#pragma unroll
      for (int u = 0; u < DK / 32 && !MMA; u++) {
        qt[(lane + 32 * u) * L::T_LD + i] = __fmul_rn(__fmul_rn(q[r][u], qInv), qScale);
        kt[(lane + 32 * u) * L::T_LD + i] = __fmul_rn(k[r][u], kInv);
      }
      d[i * L::COL_LD + lane] = v[r];
      if constexpr (MMA) {  // q and k as they came (bf16 values: exact), their norms applied to the products
#pragma unroll
        for (int u = 0; u < DK / 32; u++) {
          qr[i * L::R_LD + lane + 32 * u] = from_float<bf16_t>(q[r][u]).bits;
          kr[i * L::R_LD + lane + 32 * u] = from_float<bf16_t>(k[r][u]).bits;
        }
        if (lane == 0) qn[i] = __fmul_rn(qInv, qScale), kn[i] = kInv;
      }
      if (lane == 0) {
        cl[i] = in ? A * softplus(ga[r] + bias) : 0.f;  // log of the decay
        betas[i] = in ? 1.f / (1.f + expf(-gb[r])) : 0.f;
      }
    }
    __syncthreads();
    if (tid == 0) {
      float acc = cl[0];
      for (int i = 1; i < n; i++) cl[i] = acc = acc + cl[i];
    }
    if constexpr (MMA) {
      // the state's columns as two bf16 parts, hi + lo within 2^-17 of it: B of S^T k and S^T q ([column][key row]);
      // after the barrier: the state's last writes (its load, the previous chunk's update) are other threads'
      for (int e = tid; e < DK * 32; e += CHUNK_THREADS) {
        const int x = e >> 5, col = e & 31;
        const float v = st[x * L::COL_LD + col];
        const bf16_t hi = from_float<bf16_t>(v);
        shi[col * L::R_LD + x] = hi.bits;
        slo[col * L::R_LD + x] = from_float<bf16_t>(v - to_float(hi)).bits;
      }
    }
    __syncthreads();
    // 2. kk[t][i] = beta_t exp(cl_t - cl_i) k_t . k_i (i < t), qk[t][i] = exp(cl_t - cl_i) q_t . k_i (i <= t), zeros
    // elsewhere; the state update's weights
    if (tid < CHUNK) w[tid] = tid < n ? expf(cl[n - 1] - cl[tid]) : 0.f;
    if constexpr (MMA) {
      // a warp a 16 x 8 tile of k.k or of q.k (its tiles over the diagonal zeros, no MMA)
      constexpr int MT = CHUNK / 16, NT = CHUNK / 8;
      for (int j = warp; j < 2 * MT * NT; j += CHUNK_WARPS) {
        const int isQ = j & 1, mt = (j >> 1) % MT, nt = (j >> 1) / MT;
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        if (nt * 8 <= mt * 16 + 15) {
          for (int x = 0; x < DK; x += 32) mma_tile_k32<L::R_LD>(c, isQ ? qr : kr, mt * 16, kr, nt * 8, x, lane);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int t = mt * 16 + (lane >> 2) + 8 * (e >> 1), i = nt * 8 + 2 * (lane & 3) + (e & 1);
          const bool in = t < n && i <= t;
          const float decay = in ? expf(cl[t] - cl[i]) : 0.f;
          if (isQ) {
            qk[t * L::T_LD + i] = in ? decay * (c[e] * qn[t] * kn[i]) : 0.f;
          } else {
            kk[t * L::T_LD + i] = in && i < t ? betas[t] * decay * (c[e] * kn[t] * kn[i]) : 0.f;
          }
        }
      }
    } else {
      float ak[TI][TI] = {}, aq[TI][TI] = {};
#pragma unroll 4
      for (int x = 0; x < DK; x++) {
        float kr[TI], qr[TI], ki[TI];
        lds<TI>(kr, kt + x * L::T_LD + t2);
        lds<TI>(qr, qt + x * L::T_LD + t2);
        lds<TI>(ki, kt + x * L::T_LD + i2);
#pragma unroll
        for (int a = 0; a < TI; a++) {
#pragma unroll
          for (int b = 0; b < TI; b++) {
            ak[a][b] = fmaf(kr[a], ki[b], ak[a][b]);
            aq[a][b] = fmaf(qr[a], ki[b], aq[a][b]);
          }
        }
      }
#pragma unroll
      for (int a = 0; a < TI; a++) {
        const int t = t2 + a;
#pragma unroll
        for (int b = 0; b < TI; b++) {
          const int i = i2 + b;
          const bool in = t < n && i <= t;
          const float decay = in ? expf(cl[t] - cl[i]) : 0.f;
          kk[t * L::T_LD + i] = in && i < t ? betas[t] * decay * ak[a][b] : 0.f;
          qk[t * L::T_LD + i] = in ? decay * aq[a][b] : 0.f;
        }
      }
    }
    // 3. R_t = beta_t (v_t - g_t S^T k_t) in d, and o_t's first term g_t S^T q_t kept for step 5 (the same tile)
    float o[TS][4];
    if constexpr (MMA) {
      // a warp a 16 x 8 tile of S^T k or S^T q: each over the state's two parts; g_t S^T q_t kept in os for step 5
      constexpr int MT = CHUNK / 16;
      for (int j = warp; j < 8 * MT; j += CHUNK_WARPS) {
        const int isQ = j & 1, mt = (j >> 1) % MT, nt = (j >> 1) / MT;
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        for (int x = 0; x < DK; x += 32) {
          mma_tile_k32<L::R_LD>(c, isQ ? qr : kr, mt * 16, shi, nt * 8, x, lane);
          mma_tile_k32<L::R_LD>(c, isQ ? qr : kr, mt * 16, slo, nt * 8, x, lane);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int t = mt * 16 + (lane >> 2) + 8 * (e >> 1), col = nt * 8 + 2 * (lane & 3) + (e & 1);
          const float g = expf(cl[t]);
          if (isQ) {
            os[t * L::COL_LD + col] = g * (c[e] * qn[t]);
          } else {
            float* dt = d + t * L::COL_LD + col;
            *dt = betas[t] * (*dt - g * (c[e] * kn[t]));
          }
        }
      }
    } else {
      float sk[TS][4] = {}, sq[TS][4] = {};
#pragma unroll 4
      for (int x = 0; x < DK; x++) {
        float kr[TS], qr[TS], sv[4];
        lds<TS>(kr, kt + x * L::T_LD + t3);
        lds<TS>(qr, qt + x * L::T_LD + t3);
        lds<4>(sv, st + x * L::COL_LD + c4);
#pragma unroll
        for (int a = 0; a < TS; a++) {
#pragma unroll
          for (int b = 0; b < 4; b++) {
            sk[a][b] = fmaf(kr[a], sv[b], sk[a][b]);
            sq[a][b] = fmaf(qr[a], sv[b], sq[a][b]);
          }
        }
      }
#pragma unroll
      for (int a = 0; a < TS; a++) {
        const int t = t3 + a;
        const float g = expf(cl[t]);
#pragma unroll
        for (int b = 0; b < 4; b++) {
          float* dt = d + t * L::COL_LD + c4 + b;
          *dt = betas[t] * (*dt - g * sk[a][b]);
          o[a][b] = g * sq[a][b];
        }
      }
    }
    __syncthreads();
    // 4. D by forward substitution, a column a lane: rows in blocks of CHUNK_WARPS, a warp a row taking off the rows
    // of the blocks before (in 4 partial sums: chains a quarter as long), then warp 0 the block's own triangle in
    // registers
    for (int b0 = 0; b0 < n; b0 += CHUNK_WARPS) {
      const int t = b0 + warp;
      if (t < n && b0 > 0) {
        float acc[4] = {d[t * L::COL_LD + lane], 0.f, 0.f, 0.f};
        for (int i = 0; i < b0; i += 4) {
#pragma unroll
          for (int u = 0; u < 4; u++) acc[u] = fmaf(-kk[t * L::T_LD + i + u], d[(i + u) * L::COL_LD + lane], acc[u]);
        }
        d[t * L::COL_LD + lane] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }
      __syncthreads();
      if (warp == 0) {
        float v[CHUNK_WARPS];
#pragma unroll
        for (int u = 0; u < CHUNK_WARPS; u++) v[u] = d[(b0 + u) * L::COL_LD + lane];
#pragma unroll
        for (int u = 1; u < CHUNK_WARPS; u++) {
#pragma unroll
          for (int i = 0; i < u; i++) v[u] = fmaf(-kk[(b0 + u) * L::T_LD + b0 + i], v[i], v[u]);
        }
#pragma unroll
        for (int u = 1; u < CHUNK_WARPS; u++) {
          if (b0 + u < n) d[(b0 + u) * L::COL_LD + lane] = v[u];
        }
      }
      __syncthreads();
    }
    if constexpr (MMA) {
      // the update's B: w_i kn_i D[i][col] as two bf16 parts, [column][token] (rows past n: D's zeros)
      for (int e = tid; e < CHUNK * 32; e += CHUNK_THREADS) {
        const int i = e >> 5, col = e & 31;
        const float v = w[i] * kn[i] * d[i * L::COL_LD + col];
        const bf16_t hi = from_float<bf16_t>(v);
        dhi[col * L::D_LD + i] = hi.bits;
        dlo[col * L::D_LD + i] = from_float<bf16_t>(v - to_float(hi)).bits;
      }
      __syncthreads();
    }
    // 5. the outputs, and the state moved past the chunk (each reads d; neither reads what the other writes), 4
    // tokens at a time (rows past n are zeros, and qk's entries past the diagonal)
    {
      if constexpr (MMA) {
#pragma unroll
        for (int a = 0; a < TS; a++) lds<4>(o[a], os + (t3 + a) * L::COL_LD + c4);
      }
      const int iEnd = min(t3 + TS, n);
      for (int i = 0; i < iEnd; i += 4) {
        float qr[TS][4], dr[4][4];
#pragma unroll
        for (int a = 0; a < TS; a++) lds<4>(qr[a], qk + (t3 + a) * L::T_LD + i);
#pragma unroll
        for (int u = 0; u < 4; u++) lds<4>(dr[u], d + (i + u) * L::COL_LD + c4);
#pragma unroll
        for (int a = 0; a < TS; a++) {
#pragma unroll
          for (int u = 0; u < 4; u++) {
#pragma unroll
            for (int b = 0; b < 4; b++) o[a][b] = fmaf(qr[a][u], dr[u][b], o[a][b]);
          }
        }
      }
#pragma unroll
      for (int a = 0; a < TS; a++) {
        const int t = t3 + a;
#pragma unroll
        for (int b = 0; b < 4; b++) {
          if (t < n && j0 + c4 + b < Dv) {
            out[(long long)(c0 + t) * Hv * Dv + (long long)h * Dv + j0 + c4 + b] = from_float<T>(o[a][b]);
          }
        }
      }
    }
    if constexpr (MMA) {
      // S' = g_{n-1} S + K^T (w kn D): a warp a 16 x 8 tile of it (key rows x columns), K as it came
      const float gLast = expf(cl[n - 1]);
      for (int j = warp; j < DK / 16 * 4; j += CHUNK_WARPS) {
        const int mt = j % (DK / 16), nt = j / (DK / 16);
        float c[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          c[e] = gLast * st[(mt * 16 + (lane >> 2) + 8 * (e >> 1)) * L::COL_LD + nt * 8 + 2 * (lane & 3) + (e & 1)];
        }
        for (int i = 0; i < n; i += 32) {
          mma_tile_k32_at<L::R_LD, L::D_LD>(c, kr, mt * 16, dhi, nt * 8, i, lane);
          mma_tile_k32_at<L::R_LD, L::D_LD>(c, kr, mt * 16, dlo, nt * 8, i, lane);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
          st[(mt * 16 + (lane >> 2) + 8 * (e >> 1)) * L::COL_LD + nt * 8 + 2 * (lane & 3) + (e & 1)] = c[e];
        }
      }
    } else {
      const float gLast = expf(cl[n - 1]);
      float acc[XS][4];
#pragma unroll
      for (int a = 0; a < XS; a++) {
        lds<4>(acc[a], st + (x5 + a) * L::COL_LD + c4);
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] *= gLast;
      }
      for (int i = 0; i < n; i += 4) {
        float kr[XS][4], wr[4], dr[4][4];
        lds<4>(wr, w + i);
#pragma unroll
        for (int a = 0; a < XS; a++) lds<4>(kr[a], kt + (x5 + a) * L::T_LD + i);
#pragma unroll
        for (int u = 0; u < 4; u++) lds<4>(dr[u], d + (i + u) * L::COL_LD + c4);
#pragma unroll
        for (int a = 0; a < XS; a++) {
#pragma unroll
          for (int u = 0; u < 4; u++) {
            const float kw = wr[u] * kr[a][u];
#pragma unroll
            for (int b = 0; b < 4; b++) acc[a][b] = fmaf(kw, dr[u][b], acc[a][b]);
          }
        }
      }
      // a thread's tile of st is read by it alone in this step (step 3's reads of st ended at its barrier)
#pragma unroll
      for (int a = 0; a < XS; a++) {
#pragma unroll
        for (int b = 0; b < 4; b++) st[(x5 + a) * L::COL_LD + c4 + b] = acc[a][b];
      }
    }
    __syncthreads();
  }
  if (S == nullptr) return;
  for (int e = tid; e < DK * 32; e += CHUNK_THREADS) {
    const int row = e >> 5, col = e & 31;
    if (j0 + col < Dv) S[(long long)row * Dv + j0 + col] = from_float<ST>(st[row * L::COL_LD + col]);
  }
}

#define INSTANTIATE_CHUNKED_AS(suffix, T, DK, ss, ST, C, M, mm)                                                  \
  extern "C" __global__ void __launch_bounds__(CHUNK_THREADS, C == 32 ? (M ? 3 : DELTANET_CHUNKED32_MIN_BLOCKS) : 1) \
      deltanet_chunked##C##mm##_##suffix##_##DK##ss(                                                             \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out, float* state,               \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,   \
      int minTokens) {                                                                                           \
    deltanet_chunked<T, ST, DK, C, M>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv, Dv, \
                                      slotFloats, ssmAt, minTokens);                                             \
  }
#define INSTANTIATE_CHUNKED(suffix, T, DK, ss, ST, C)          \
  INSTANTIATE_CHUNKED_AS(suffix, T, DK, ss, ST, C, false, )    \
  INSTANTIATE_CHUNKED_AS(suffix, T, DK, ss, ST, C, true, _mma)
#define INSTANTIATE_CHUNKED_DK(suffix, T, DK)                                \
  DELTANET_CHUNKS(INSTANTIATE_CHUNKED, suffix, T, DK, , float)               \
  DELTANET_CHUNKS(INSTANTIATE_CHUNKED, suffix, T, DK, _sbf16, bf16_t)

DELTANET_KEY_DIMS(INSTANTIATE_CHUNKED_DK, bf16, bf16_t)
#undef INSTANTIATE_CHUNKED_DK
#undef INSTANTIATE_CHUNKED
#undef INSTANTIATE_CHUNKED_AS
