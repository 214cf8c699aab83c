// deltanet_recurrent's arithmetic, bit for bit, on a coalesced state (included by deltanet.cu, after its helpers).
//
// deltanet_recurrent gives a warp COLS columns of a v head's state, each column's DK rows spread over PARTS lanes, so
// one of its loads reads 32 bytes (8 floats) of each of PARTS state rows 512 bytes apart. Session 46's profile of
// qwen3.5-27b's graphed decode steps put that rule at ~1 TB/s of state traffic from 72 rows on (49.9 of a 160-row
// step's 75.8 ms; 0.24 ms a layer at the copy bandwidth, 1.04 measured).
//
// deltanet_recurrent_wide gives each lane the same rows of one column as deltanet_recurrent does (rows part + PARTS i,
// i < 32), but puts a warp's 32 lanes on 32 columns of one part: a block per (sequence, v head, 32 columns), PARTS
// warps, so each load reads 128 contiguous bytes of one state row. A lane's partial sums are deltanet_recurrent's own
// (its m[4], o[4] chains); the PARTS partials of a column meet in shared memory and are added in the order
// deltanet_recurrent's butterfly (column_sum) adds them: pairs, then pairs of pairs ((p0 + p1) + (p2 + p3) for DK 128).
// So its outputs and states are deltanet_recurrent's bits (the deltanet GPU test compares them). Two block barriers a
// token: meant for decode rows (one token a sequence), not long prompt chunks, until measured: it serves the sequences
// of at most maxTokens tokens (QUIRE_DELTANET_WIDE_MAX_TOKENS), the step's deltanet_recurrent launch the others.
//
// grid (S, Hv, ceil(Dv / 32)), block 32 PARTS (= DK) threads.

/** The butterfly's sum of a column's PARTS partials in shared memory (red[p][lane]), as lane_parts_sum adds them. */
template <int PARTS>
__device__ __forceinline__ float parts_sum(const float (*red)[32], int lane) {
  float v[PARTS];
#pragma unroll
  for (int p = 0; p < PARTS; p++) v[p] = red[p][lane];
  return lane_parts_sum<PARTS>(v);
}

template <typename T, typename ST, int DK>
__device__ __forceinline__ void deltanet_recurrent_wide(const T* conv, const T* ba, int ldba, const T* aLog,
                                                        const T* dtBias, T* out, float* state, const int* qsl,
                                                        const int* seqLens, const int* slots, int Hk, int Hv, int Dv,
                                                        int slotFloats, int ssmAt, int maxTokens) {
  constexpr int PARTS = DK / 32;
  __shared__ float qks[PARTS][2 * DK];  // each warp's own q and k, as deltanet_recurrent's qs and ks
  __shared__ float red[2][PARTS][32];   // a token's partial sums: S^T k, then S^T q
  pdl_trigger_if(DELTANET_TRIGGER_EARLY);
  if (!DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  const int s = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, part = threadIdx.x >> 5;
  const int j = blockIdx.z * 32 + lane;
  const int kh = h / (Hv / Hk);
  const int C = 2 * Hk * DK + Hv * Dv;
  const int start = qsl[s], end = qsl[s + 1];
  if (start == end || end - start > maxTokens) return;  // longer ones: the step's deltanet_recurrent launch
  const int pos0 = seqLens[s] - (end - start);
  const int slot = slots[s];
  ST* S = head_state<ST, DK>(state, slot, slotFloats, ssmAt, h, Dv);
  float* qs = qks[part];
  float* ks = qs + DK;
  float col[32];
  load_column<DK>(S, part, j, Dv, pos0 > 0, col);
  const float A = -expf(to_float(aLog[h]));
  const float bias = to_float(dtBias[h]);
  const float qScale = __fdiv_rn(1.f, sqrtf((float)DK));
  if (DELTANET_READ_EARLY) pdl_wait_then_trigger(DELTANET_TRIGGER_EARLY);
  TokenIn<DK> next;
  load_token<T, DK, false>(conv, ba, ldba, start, C, Hk, Hv, Dv, kh, h, j, next);
  for (int t = start; t < end; t++) {
    const TokenIn<DK> in = next;
    if (t + 1 < end) load_token<T, DK, false>(conv, ba, ldba, t + 1, C, Hk, Hv, Dv, kh, h, j, next);
    // a column's partials meet in red[which]: each barrier also ends every read of the other buffer before it
    const float outJ = rule_token<DK>(in, col, qs, ks, part, A, bias, qScale, [&](int which, float x) {
      red[which][part][lane] = x;
      __syncthreads();
      return parts_sum<PARTS>(red[which], lane);
    });
    if (part == 0 && j < Dv) out[(long long)t * Hv * Dv + (long long)h * Dv + j] = from_float<T>(outJ);
  }
  store_column<DK>(S, part, j, Dv, col);
}

// deltanet_recurrent_mixed: a mixed step's rule in one launch (QUIRE_DELTANET_ONE_LAUNCH). A block per (sequence,
// v head, 32 columns), DK threads: a sequence of at most maxTokens tokens takes deltanet_recurrent_wide's path, a
// longer one deltanet_recurrent's, its PARTS warps each on COLS of the block's 32 columns (a warp's own q and k in
// rq). Why: as two launches, the second's blocks wait for the first to end (session 47, bench-deltanet: 160 decode
// rows and a 512-token chunk took 1.48 ms a layer so, 1.22 as one launch of the wide build). Each path is its
// launch's, so the bits are theirs. Sequences of skipFrom tokens and more are left to deltanet_chunked's launch.
//
// grid (S, Hv, ceil(Dv / 32)), block DK threads.
template <typename T, typename ST, int DK>
__device__ __forceinline__ void deltanet_recurrent_mixed(const T* conv, const T* ba, int ldba, const T* aLog,
                                                         const T* dtBias, T* out, float* state, const int* qsl,
                                                         const int* seqLens, const int* slots, int Hk, int Hv, int Dv,
                                                         int slotFloats, int ssmAt, int maxTokens, int skipFrom) {
  constexpr int PARTS = DK / 32;
  __shared__ float rq[PARTS][2 * DK];
  // the step's metadata was copied before its first kernel ran: safe to read before the dependent-launch wait
  const int q = qsl[blockIdx.x + 1] - qsl[blockIdx.x];
  if (q <= maxTokens) {
    deltanet_recurrent_wide<T, ST, DK>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv, Dv,
                                       slotFloats, ssmAt, maxTokens);
  } else {
    const int warp = threadIdx.x >> 5;
    deltanet_recurrent<T, ST, DK, false>(conv, ba, ldba, aLog, dtBias, out, state, qsl, seqLens, slots, Hk, Hv, Dv,
                                         slotFloats, ssmAt, blockIdx.z * PARTS + warp, rq[warp], rq[warp] + DK,
                                         maxTokens, skipFrom);
  }
}
