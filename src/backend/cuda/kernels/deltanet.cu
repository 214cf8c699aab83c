// Gated DeltaNet on the device (Backend.causalConv1d, gatedDeltaRule, rmsNormGated; cpu/deltanet.ts is their
// reference), on each sequence's recurrent state in place: a step reads a sequence's state from its slot and writes
// it back there, never copying or gathering whole states.
//
// State (kv-memory.ts allocates it): a slot per sequence, slot s at state + s * slotFloats; in it, layer l's conv
// window at l * convFloats floats ([K - 1, C], oldest row first, f32), then, after every layer's window, layer l's
// delta-rule state ([Hv, Dk, Dv]) of type ST at ssmAt elements of ST from the slot's start: f32 (the default), or
// bf16 (--mamba-ssm-cache-dtype bfloat16: half the bytes a step reads and writes; the rule still runs in f32
// registers, loaded from and rounded back to bf16 once a step). The _sbf16 builds take bf16 states. A slot is
// contiguous, so copyRecurrentState is one copy. A sequence whose chunk starts at position 0 reads zeros, never what
// its slot held; a row with no slot (-1: graph padding) reads zeros and keeps nothing.
//
// The step's sections come as pointers: queryStartLoc [S + 1], seqLens [S], stateSlots [S]. The conv's x, the rule's
// ba and the norm's z may be columns of one wider GEMM output (the layer's in_proj, Backend.columns): their rows are
// ldx, ldba, ldz elements apart.
//
//   conv1d_silu: out[t, c] = silu(sum_j w[c, j] in[t - K + 1 + j, c]), in = the window, then the chunk's rows x.
//     A thread owns one (sequence, channel) and walks its chunk with the last K - 1 inputs in registers, then stores
//     them as the new window: no other thread reads that window, so the update needs no second launch.
//     grid (S, ceil(C / 128)), block 128. Decode rows take it (one token each).
//   conv1d_silu_tokens + conv1d_window: the same outputs, bit for bit (the same fmaf chain in the same order), for
//     steps with prompt chunks, where a thread per (sequence, channel) walked a long chunk alone (session 30, H200:
//     29 of a 1000-token prompt's 164 ms on qwen3.5-27b). conv1d_silu_tokens: a thread per (token, channel), its
//     sequence found by a binary search of queryStartLoc, its K inputs read from x or the window (grid
//     (ceil(T / CONV_TOKENS), ceil(C / 128)), block 128, CONV_TOKENS tokens a thread). conv1d_window then writes
//     each sequence's new window after every read of the old one (a second launch: same grid as conv1d_silu).
//   deltanet_recurrent: the gated delta rule token by token (the exact definition; the CPU's recurrent form). A warp
//     serves COLS = 32 / (Dk / 32) columns j of one v head's state, each column S[:, j] spread over Dk / 32 lanes
//     of 32 rows (registers: 32 floats a lane whatever Dk, and more warps to a step), kept in registers for the whole
//     chunk, so the state is read and written once a step. Per token the warp l2-normalises q and k of the head's
//     key head (a butterfly each), computes decay = exp(-exp(aLog) softplus(a + dtBias)) and beta = sigmoid(b), then
//     S = decay S; delta_j = beta (v_j - S[:, j] . k); S[:, j] += k delta_j; out_j = S[:, j] . q (a column's dot
//     products summed over its lanes by shuffles). The next token's inputs are loaded while this one computes.
//     grid (S, Hv, ceil(Dv / COLS)), block 32; Dk in DELTANET_KEY_DIMS.
//   rms_norm_gated: per group of G channels, rmsnorm(x) * w * silu(z): a warp a group.
//     grid (T, ceil(N / G / 4)), block 128.
//   deltanet_recurrent_norm: the two for a decode step (one token a sequence, G = Dv) in one launch, the same bits:
//     grid (S, Hv), block 32 ceil(Dv / COLS) (a warp per COLS columns, as the rule's grid z), the rule's row in
//     shared memory, then warp 0 normalises it (QUIRE_DELTANET_FUSED_NORM: one launch a layer fewer).
//   deltanet_decode: conv1d_silu, the rule and the gated norm of a decode step in one launch, the same bits
//     (QUIRE_DELTANET_FUSED_DECODE: two launches a layer fewer; the issue's fused decode kernel). grid (S, Hv); below.
//   deltanet_recurrent_wide: deltanet_recurrent's bits with each load reading 128 contiguous bytes of a state row
//     (deltanet_wide.cuh): the sequences of at most QUIRE_DELTANET_WIDE_MAX_TOKENS tokens (maxTokens); a step's
//     deltanet_recurrent launch then skips them (skipUpTo), both launches in a mixed step.
//   deltanet_recurrent_mixed (deltanet_wide.cuh, QUIRE_DELTANET_ONE_LAUNCH): both in one launch for a mixed step.
//   deltanet_chunked (deltanet_chunked.cu): the sequences of at least QUIRE_DELTANET_CHUNKED_FROM tokens, in chunks
//     whose products the block shares (within rounding of the recurrence, not its bits); the deltanet_recurrent
//     launch skips them too (skipFrom). The helpers these files share: deltanet_common.cuh.
//
// Dependent launches (common.cuh) of the decode kernels (conv1d_silu, deltanet_recurrent, rms_norm_gated), two
// switches (QUIRE_KERNEL_DEFINES; both 0 until measured; neither changes a bit):
//   DELTANET_TRIGGER_EARLY: each lets its dependent launch before it waits, as the norms do (norm.cuh), so the
//     out_proj GEMM after the rule and the gated norm launches at their start and streams its first stages of weights
//     through them. Without it the GEMM launches once the norm has waited for the rule, and a DeltaNet layer's three
//     latency-bound kernels (session 45, qwen3.5-27b batch 1: 14 us of the layer's 200) stream no weights at all.
//   DELTANET_READ_EARLY: conv1d_silu reads its taps and its window, deltanet_recurrent its state (its columns' 32
//     floats a lane) and gate weights, before the wait: the window and the state were last written by this layer in
//     an earlier step (every kernel before this one's predecessor has finished by then), never by the kernel before.
//     At 64 rows the rule's states are 201 MB a layer, a read that the conv's run can hide.
#include "deltanet_common.cuh"

// CONV_MAX_TAPS, DELTANET_KEY_DIMS(X, s, T): from TypeScript (kernel-defines.ts)

/**
 * One channel's next output, silu(sum_j taps[j] in_j) over its last K - 1 inputs hist (oldest first) and `in`, the taps
 * in order as the CPU sums them (registers indexed by unrolled constants only); hist then moves on by `in`.
 */
__device__ __forceinline__ float conv_silu_step(const float* taps, float* hist, float in, int K) {
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS - 1; j++) if (j < K - 1) acc = fmaf(taps[j], hist[j], acc);
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS; j++) if (j == K - 1) acc = fmaf(taps[j], in, acc);
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS - 1; j++) {
    if (j < K - 2) hist[j] = hist[j + 1];
    else if (j == K - 2) hist[j] = in;
  }
  return acc / (1.f + expf(-acc));
}

template <typename T>
__device__ __forceinline__ void conv1d_silu(const T* x, const T* w, T* out, float* state, const int* qsl,
                                            const int* seqLens, const int* slots, int C, int ldx, int K,
                                            int slotFloats, int windowAt) {
  pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  if (!DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  const int s = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int start = qsl[s], end = qsl[s + 1];
  const int pos0 = seqLens[s] - (end - start);
  const int slot = slots[s];
  float* win = slot >= 0 ? state + (long long)slot * slotFloats + windowAt : nullptr;
  float taps[CONV_MAX_TAPS], hist[CONV_MAX_TAPS];  // hist[0 .. K-2]: the last K - 1 inputs, oldest first
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS; j++) {
    taps[j] = j < K ? to_float(w[(long long)c * K + j]) : 0.f;
    hist[j] = j < K - 1 && win != nullptr && pos0 > 0 ? win[(long long)j * C + c] : 0.f;
  }
  if (DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);  // x is the kernel before's output
  for (int t = start; t < end; t++) {
    out[(long long)t * C + c] = from_float<T>(conv_silu_step(taps, hist, to_float(x[(long long)t * ldx + c]), K));
  }
  if (win == nullptr) return;
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS - 1; j++) if (j < K - 1) win[(long long)j * C + c] = hist[j];
}

constexpr int CONV_TOKENS = 8;

template <typename T>
__device__ __forceinline__ void conv1d_silu_tokens(const T* x, const T* w, T* out, const float* state, const int* qsl,
                                                   const int* seqLens, const int* slots, int S, int T_, int C,
                                                   int ldx, int K, int slotFloats, int windowAt) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int t0 = blockIdx.x * CONV_TOKENS;
  if (c >= C || t0 >= T_) return;
  float taps[CONV_MAX_TAPS];
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS; j++) taps[j] = j < K ? to_float(w[(long long)c * K + j]) : 0.f;
  int lo = 0, hi = S - 1;  // the sequence of t0: the last s with qsl[s] <= t0
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (qsl[mid] <= t0) lo = mid; else hi = mid - 1;
  }
  int s = lo;
  for (int t = t0; t < t0 + CONV_TOKENS && t < T_; t++) {
    while (t >= qsl[s + 1]) s++;
    const int start = qsl[s];
    const int pos0 = seqLens[s] - (qsl[s + 1] - start);
    const int slot = slots[s];
    const float* win = slot >= 0 && pos0 > 0 ? state + (long long)slot * slotFloats + windowAt : nullptr;
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < CONV_MAX_TAPS; j++) {
      if (j >= K) continue;
      const int u = t - (K - 1) + j;  // this tap's input: a row of x, or (before the chunk) of the window
      float in;
      if (u >= start) in = to_float(x[(long long)u * ldx + c]);
      else in = win != nullptr ? win[(long long)(u - start + K - 1) * C + c] : 0.f;
      acc = fmaf(taps[j], in, acc);
    }
    out[(long long)t * C + c] = from_float<T>(acc / (1.f + expf(-acc)));
  }
}

template <typename T>
__device__ __forceinline__ void conv1d_window(const T* x, float* state, const int* qsl, const int* seqLens,
                                              const int* slots, int C, int ldx, int K, int slotFloats, int windowAt) {
  const int s = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int slot = slots[s];
  if (c >= C || slot < 0) return;
  const int start = qsl[s], len = qsl[s + 1] - start;
  const int pos0 = seqLens[s] - len;
  float* win = state + (long long)slot * slotFloats + windowAt;
  float next[CONV_MAX_TAPS];
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS - 1; j++) {
    if (j >= K - 1) continue;
    const int u = len - (K - 1) + j;  // the chunk's row u, or (u < 0) the old window's row K - 1 + u
    next[j] = u >= 0 ? to_float(x[(long long)(start + u) * ldx + c]) : pos0 > 0 ? win[(long long)(K - 1 + u) * C + c] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS - 1; j++) if (j < K - 1) win[(long long)j * C + c] = next[j];
}

/**
 * One token of the rule on a lane's rows of its column (col: rows part + PARTS i): q and k l2-normed into the warp's
 * qs and ks, decay and beta, S = decay S, delta = beta (v - S^T k), S += k delta, and out = S^T q, returned.
 * `sum(which, x)` adds a column's PARTS partials x (which: 0 for S^T k, 1 for S^T q) as column_sum's butterfly does:
 * by shuffles (deltanet_recurrent) or through shared memory (deltanet_recurrent_wide), so both give the same bits.
 */
template <int DK, typename Sum>
__device__ __forceinline__ float rule_token(const TokenIn<DK>& in, float* col, float* qs, float* ks, int part, float A,
                                            float bias, float qScale, Sum sum) {
  constexpr int PARTS = DK / 32;
  float decay, beta;
  token_gates<DK>(in, qs, ks, A, bias, qScale, decay, beta);
  float m[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; i++) {
    col[i] = __fmul_rn(col[i], decay);
    m[i & 3] = fmaf(col[i], ks[part + PARTS * i], m[i & 3]);
  }
  const float delta = __fmul_rn(in.v - sum(0, (m[0] + m[1]) + (m[2] + m[3])), beta);
  float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; i++) {
    col[i] = fmaf(ks[part + PARTS * i], delta, col[i]);
    o[i & 3] = fmaf(col[i], qs[part + PARTS * i], o[i & 3]);
  }
  return sum(1, (o[0] + o[1]) + (o[2] + o[3]));
}

// `group`: the warp's COLS columns; qs, ks: the warp's own [DK] each. FUSED (deltanet_recurrent_norm: one token a
// sequence): the output row goes to out[j] (the block's shared row), not to out[t][h][j].
// CONV_ROW: conv is the block's shared row of q | k | v (deltanet_decode), whose kernel has done its own dependent-
// launch wait (PDL false).
template <typename T, typename ST, int DK, bool FUSED, bool CONV_ROW = false, bool PDL = true>
__device__ __forceinline__ void deltanet_recurrent(const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out,
                                                   float* state, const int* qsl, const int* seqLens, const int* slots,
                                                   int Hk, int Hv, int Dv, int slotFloats, int ssmAt, int group,
                                                   float* qs, float* ks, int skipUpTo = 0,
                                                   int skipFrom = 0x7fffffff) {
  constexpr int PARTS = DK / 32, COLS = 32 / PARTS;  // a column's DK rows over PARTS lanes, 32 a lane
  if (PDL) pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  if (PDL && !DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  const int s = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int part = lane / COLS;  // lane holds rows d = part + PARTS i (interleaved: no bank conflicts on qs, ks)
  const int j = group * COLS + lane % COLS;
  const int kh = h / (Hv / Hk);
  const int C = 2 * Hk * DK + Hv * Dv;
  const int start = qsl[s], end = qsl[s + 1];
  // none (start == end), or left to deltanet_recurrent_wide's launch, or to deltanet_chunked's
  if (end - start <= skipUpTo || end - start >= skipFrom) return;
  const int pos0 = seqLens[s] - (end - start);
  const int slot = slots[s];
  ST* S = head_state<ST, DK>(state, slot, slotFloats, ssmAt, h, Dv);
  float col[32];
  load_column<DK>(S, part, j, Dv, pos0 > 0, col);
  const float A = -expf(to_float(aLog[h]));
  const float bias = to_float(dtBias[h]);
  const float qScale = __fdiv_rn(1.f, sqrtf((float)DK));
  if (PDL && DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);  // conv and ba: the kernels before's
  TokenIn<DK> next;
  load_token<T, DK, CONV_ROW>(conv, ba, ldba, start, C, Hk, Hv, Dv, kh, h, j, next);
  for (int t = start; t < end; t++) {
    const TokenIn<DK> in = next;
    if (t + 1 < end) load_token<T, DK, CONV_ROW>(conv, ba, ldba, t + 1, C, Hk, Hv, Dv, kh, h, j, next);
    const float outJ = rule_token<DK>(in, col, qs, ks, part, A, bias, qScale,
                                      [](int, float x) { return column_sum<COLS>(x); });
    if (part == 0 && j < Dv) out[FUSED ? j : (long long)t * Hv * Dv + (long long)h * Dv + j] = from_float<T>(outJ);
  }
  store_column<DK>(S, part, j, Dv, col);
}

/** rmsnorm(x) * w * silu(z) over one group of G channels, by one warp (rms_norm_gated and the fused kernel alike). */
template <typename T>
__device__ __forceinline__ void gated_norm_group(const T* x, const T* z, const T* w, T* out, int G, float eps) {
  const int lane = threadIdx.x & 31;
  float p = 0.f;
  for (int i = lane; i < G; i += 32) {
    const float v = to_float(x[i]);
    p = fmaf(v, v, p);
  }
  const float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(warp_sum(p), (float)G), eps)));
  for (int i = lane; i < G; i += 32) {
    const float zf = to_float(z[i]);
    const float gate = zf / (1.f + expf(-zf));
    out[i] = from_float<T>(__fmul_rn(__fmul_rn(__fmul_rn(to_float(x[i]), inv), to_float(w[i])), gate));
  }
}

template <typename T>
__device__ __forceinline__ void rms_norm_gated(const T* x, const T* z, int ldz, const T* w, T* out, int N, int G,
                                               float eps) {
  pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  const int group = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (group * G >= N) return;
  const long long at = (long long)blockIdx.x * N + (long long)group * G;
  gated_norm_group(x + at, z + (long long)blockIdx.x * ldz + (long long)group * G, w, out + at, G, eps);
}

#include "deltanet_fused.cuh"
#include "deltanet_wide.cuh"

// A state build (ST: the delta-rule state's type) of each decode kernel; `ss` ends its name (empty: f32 states).
#define INSTANTIATE_DK_ST(suffix, T, DK, ss, ST)                                                                 \
  extern "C" __global__ void __launch_bounds__(32) deltanet_recurrent_##suffix##_##DK##ss(                       \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out, float* state,               \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,   \
      int skipUpTo, int skipFrom) {                                                                              \
    __shared__ float qks[2 * DK];                                                                                \
    deltanet_recurrent<T, ST, DK, false>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv,  \
                                         Dv, slotFloats, ssmAt, blockIdx.z, qks, qks + DK, skipUpTo, skipFrom);  \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(DK) deltanet_recurrent_mixed_##suffix##_##DK##ss(                  \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out, float* state,               \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,   \
      int maxTokens, int skipFrom) {                                                                             \
    deltanet_recurrent_mixed<T, ST, DK>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv,   \
                                        Dv, slotFloats, ssmAt, maxTokens, skipFrom);                             \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(DK) deltanet_recurrent_wide_##suffix##_##DK##ss(                   \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, T* out, float* state,               \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt,   \
      int maxTokens) {                                                                                           \
    deltanet_recurrent_wide<T, ST, DK>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv, Dv, \
                                       slotFloats, ssmAt, maxTokens);                                            \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(512) deltanet_recurrent_norm_##suffix##_##DK##ss(                \
      const T* conv, const T* ba, int ldba, const T* aLog, const T* dtBias, const T* z, int ldz, const T* normW, \
      T* out, float eps, float* state, const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv,      \
      int Dv, int slotFloats, int ssmAt) {                                                                       \
    deltanet_recurrent_norm<T, ST, DK>(conv, ba, ldba, aLog, dtBias, z, ldz, normW, out, eps, state, qsl,        \
                                       seqLens, slots, Hk, Hv, Dv, slotFloats, ssmAt);                           \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(512) deltanet_decode_##suffix##_##DK##ss(                         \
      const T* x, int ldx, const T* convW, int K, int windowAt, int* arrivals, const T* ba, int ldba,            \
      const T* aLog, const T* dtBias, const T* z, int ldz, const T* normW, T* out, float eps, float* state,       \
      const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv, int Dv, int slotFloats, int ssmAt) { \
    deltanet_decode<T, ST, DK>(x, ldx, convW, K, windowAt, arrivals, ba, ldba, aLog, dtBias, z, ldz, normW, out, \
                               eps, state, qsl, seqLens, slots, Hk, Hv, Dv, slotFloats, ssmAt);                  \
  }

#define INSTANTIATE_DK(suffix, T, DK)     \
  INSTANTIATE_DK_ST(suffix, T, DK, , float) \
  INSTANTIATE_DK_ST(suffix, T, DK, _sbf16, bf16_t)

#define INSTANTIATE(suffix, T)                                                                                   \
  extern "C" __global__ void conv1d_silu_##suffix(const T* x, const T* w, T* out, float* state, const int* qsl,  \
                                                  const int* seqLens, const int* slots, int C, int ldx, int K,   \
                                                  int slotFloats, int windowAt) {                                \
    conv1d_silu<T>(x, w, out, state, qsl, seqLens, slots, C, ldx, K, slotFloats, windowAt);                           \
  }                                                                                                              \
  extern "C" __global__ void conv1d_silu_tokens_##suffix(const T* x, const T* w, T* out, const float* state,      \
                                                         const int* qsl, const int* seqLens, const int* slots,  \
                                                         int S, int T_, int C, int ldx, int K, int slotFloats,   \
                                                         int windowAt) {                                         \
    pdl_begin();                                                                                                 \
    conv1d_silu_tokens<T>(x, w, out, state, qsl, seqLens, slots, S, T_, C, ldx, K, slotFloats, windowAt);             \
  }                                                                                                              \
  extern "C" __global__ void conv1d_window_##suffix(const T* x, float* state, const int* qsl, const int* seqLens, \
                                                    const int* slots, int C, int ldx, int K, int slotFloats,     \
                                                    int windowAt) {                                              \
    pdl_begin();                                                                                                 \
    conv1d_window<T>(x, state, qsl, seqLens, slots, C, ldx, K, slotFloats, windowAt);                                 \
  }                                                                                                              \
  extern "C" __global__ void rms_norm_gated_##suffix(const T* x, const T* z, int ldz, const T* w, T* out, int N,  \
                                                     int G, float eps) {                                         \
    rms_norm_gated<T>(x, z, ldz, w, out, N, G, eps);                                                                  \
  }                                                                                                              \
  DELTANET_KEY_DIMS(INSTANTIATE_DK, suffix, T)

INSTANTIATE(bf16, bf16_t)
#undef INSTANTIATE
#undef INSTANTIATE_DK
#undef INSTANTIATE_DK_ST
