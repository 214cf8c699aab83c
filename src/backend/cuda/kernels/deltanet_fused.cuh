// A decode step's rule with its gated norm, and with its conv too, in one launch each (included by deltanet.cu, after
// its helpers): deltanet_recurrent_norm (QUIRE_DELTANET_FUSED_NORM) and deltanet_decode (QUIRE_DELTANET_FUSED_DECODE),
// the bits of the separate launches (the deltanet GPU test compares them). Off by default: session 46 measured neither
// faster at batch 1 on qwen3.5-27b (docs/perf-log.md).

/**
 * deltanet_recurrent and rms_norm_gated of a decode step (one token a sequence) in one launch: a block per (sequence,
 * v head), a warp per COLS columns (blockDim.x / 32 warps: all Dv columns); the rule's output row, rounded to T as
 * the rule stores it, stays in shared memory, and warp 0 normalises it as rms_norm_gated does (G = Dv): the bits of
 * the two launches. Dynamic shared memory: a warp's qs and ks (2 DK floats a warp); ys: the row (Dv <= 256).
 */
template <typename T, typename ST, int DK>
__device__ __forceinline__ void deltanet_recurrent_norm(const T* conv, const T* ba, int ldba, const T* aLog,
                                                        const T* dtBias, const T* z, int ldz, const T* normW, T* out,
                                                        float eps, float* state, const int* qsl, const int* seqLens,
                                                        const int* slots, int Hk, int Hv, int Dv, int slotFloats,
                                                        int ssmAt) {
  DYNAMIC_SHARED(float, qks);
  __shared__ T ys[256];
  const int warp = threadIdx.x >> 5;
  float* qs = qks + warp * 2 * DK;
  deltanet_recurrent<T, ST, DK, true>(conv, ba, ldba, aLog, dtBias, ys, state, qsl, seqLens, slots, Hk, Hv, Dv,
                                      slotFloats, ssmAt, warp, qs, qs + DK);
  __syncthreads();
  const int s = blockIdx.x, h = blockIdx.y, t = qsl[s];
  if (warp != 0 || qsl[s + 1] == t) return;
  gated_norm_group(ys, z + (long long)t * ldz + (long long)h * Dv, normW,
                   out + (long long)t * Hv * Dv + (long long)h * Dv, Dv, eps);
}

/**
 * A DeltaNet layer's whole decode step (one token a sequence) for a (sequence, v head) in one launch: the causal conv
 * of the 2 DK + Dv channels it reads (its key head's q and k, its v head's v: a thread each, conv_silu_step as
 * conv1d_silu, the outputs rounded to T as conv1d_silu stores them, in shared memory), the rule on that row, and the
 * gated norm (deltanet_recurrent_norm's): the bits of the three launches. The windows move on as conv1d_silu moves
 * them: a v channel's by its own thread; a key head's q/k windows are read by its Hv / Hk v heads' blocks, each of
 * which counts itself in arrivals[slot][kh] once it has read them, and the last to arrive writes them and sets the
 * count back to zero (no block waits for another). The windows and weights are read before the dependent-launch wait
 * (this layer's windows were written in an earlier step). Block: 32 x the larger of ceil(Dv / COLS) and
 * ceil((2 DK + Dv) / 32) warps (<= 512); dynamic shared memory: 2 DK floats a warp.
 */
template <typename T, typename ST, int DK>
__device__ __forceinline__ void deltanet_decode(const T* x, int ldx, const T* convW, int K, int windowAt, int* arrivals,
                                                const T* ba, int ldba, const T* aLog, const T* dtBias, const T* z,
                                                int ldz, const T* normW, T* out, float eps, float* state,
                                                const int* qsl, const int* seqLens, const int* slots, int Hk, int Hv,
                                                int Dv, int slotFloats, int ssmAt) {
  DYNAMIC_SHARED(float, qks);
  __shared__ T ys[256];
  __shared__ T convRow[2 * DK + 256];
  __shared__ int last;
  pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  const int s = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk), i = threadIdx.x;
  const int C = 2 * Hk * DK + Hv * Dv;
  // this thread's channel: its key head's q (i < DK), then k, then its v head's v; none past them
  const int c = i < DK       ? kh * DK + i
                : i < 2 * DK ? (Hk + kh) * DK + i - DK
                : i < 2 * DK + Dv ? 2 * Hk * DK + h * Dv + i - 2 * DK
                                  : -1;
  const int start = qsl[s];
  const bool hasToken = qsl[s + 1] > start;
  const int pos0 = seqLens[s] - 1;
  const int slot = slots[s];
  float* win = slot >= 0 && hasToken ? state + (long long)slot * slotFloats + windowAt : nullptr;
  float taps[CONV_MAX_TAPS], hist[CONV_MAX_TAPS];
#pragma unroll
  for (int j = 0; j < CONV_MAX_TAPS; j++) {
    taps[j] = c >= 0 && j < K ? to_float(convW[(long long)c * K + j]) : 0.f;
    hist[j] = c >= 0 && j < K - 1 && win != nullptr && pos0 > 0 ? win[(long long)j * C + c] : 0.f;
  }
  pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);  // x: the in_proj GEMM's output
  if (c >= 0 && hasToken) {
    convRow[i] = from_float<T>(conv_silu_step(taps, hist, to_float(x[(long long)start * ldx + c]), K));
  }
  __syncthreads();
  if (i == 0) {
    last = 0;
    if (win != nullptr) {
      __threadfence();  // this block's reads of the q/k windows before its count
      const int at = slot * Hk + kh;
      last = atomicAdd(&arrivals[at], 1) == Hv / Hk - 1;
      if (last) arrivals[at] = 0;
    }
  }
  __syncthreads();
  if (win != nullptr && c >= 0 && (i >= 2 * DK || last)) {
#pragma unroll
    for (int j = 0; j < CONV_MAX_TAPS - 1; j++) if (j < K - 1) win[(long long)j * C + c] = hist[j];
  }
  const int warp = i >> 5;
  float* qs = qks + warp * 2 * DK;
  deltanet_recurrent<T, ST, DK, true, true, false>(convRow, ba, ldba, aLog, dtBias, ys, state, qsl, seqLens, slots,
                                                   Hk, Hv, Dv, slotFloats, ssmAt, warp, qs, qs + DK);
  __syncthreads();
  if (warp != 0 || !hasToken) return;
  gated_norm_group(ys, z + (long long)start * ldz + (long long)h * Dv, normW,
                   out + (long long)start * Hv * Dv + (long long)h * Dv, Dv, eps);
}
