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

/** The butterfly's sum of a column's PARTS partials held by one lane (v[p]): pairs, then pairs of pairs. */
template <int PARTS>
__device__ __forceinline__ float lane_parts_sum(float* v) {
#pragma unroll
  for (int w = 1; w < PARTS; w <<= 1) {
#pragma unroll
    for (int p = 0; p < PARTS; p += 2 * w) v[p] = v[p] + v[p + w];
  }
  return v[0];
}

/** The same of partials in shared memory (red[p][lane]). */
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


// deltanet_recurrent_lanes: the wide build's loads with a lane holding all DK rows of its column, so a block is one
// warp on 32 columns: no barrier, no partials in shared memory, and one warp (not PARTS) norming a token's q and k for
// those columns. Why: at 160 rows the wide build moved 2.87 TB/s of f32 state and bf16 states (half the bytes) gained
// it 10% (session 47, bench-deltanet): past the loads, its per-token work bounds it. A lane adds its column's PARTS
// partials itself, each summed as deltanet_recurrent's lane sums its rows (the m[4], o[4] chains over rows
// part + PARTS i), then pairs and pairs of pairs as the butterfly: deltanet_recurrent's bits (the deltanet GPU test).
// DK floats of state a lane, in registers (QUIRE_DELTANET_LANES; ptxas: no spills at DK 128).
//
// grid (S, Hv, ceil(Dv / 32)), block 32 threads.

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
