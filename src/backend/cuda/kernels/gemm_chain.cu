// Decode GEMMs of a few tokens, y[T, N] = x[T, K] * w[N, K]^T for T <= 8, summed in cuBLASLt's order: each output is
// one m16n8k16 chain over k16 groups in natural order, from zero, in fp32, rounded to bf16 once (or, in the _s2 builds
// and gemm_chain_whole_split, a few such chains over equal slices of k, added in slice order: not cuBLASLt's bits).
// That is the order of cuBLASLt's heuristic kernels for large batches on the H100 (where it was checked: docs/perf-log.md,
// session 10); the tensor cores sum a k16 group the same in any order of its k, so a lane may hold any of the group's k
// as long as A and B agree.
//
// One warp per 16 weight rows (the mma's M side: a token is an n column, so one token wastes 7/8 of an n8 tile, not
// 15/16 of an m16 one). The warp streams its rows and the tokens' slice of k through a private cp.async ring of S
// stages of 64 k (16-byte pieces, XOR-swizzled by row), and takes fragments by ldmatrix. One warp a block: the
// chain's length is K / 16 mma whatever the grid, so the grid is the N / 16 tiles spread over every SM.
//
//   gemm_chain:           y[T, N] (+ bias[N] before the rounding, where bias is not null)
//   gemm_chain_whole:     y[T, N] for weights too narrow for 16-row tiles: 8 rows a warp, read whole (below); its
//                         _split build splits their k between 2 to 8 warps
//   gemm_chain_silu_pair: y[T, N / 2] = silu(x w[0:N/2]^T) * (x w[N/2:N]^T), each factor rounded to bf16 first (the
//                         gate_up GEMM and silu_mul of kernels/activation.cu in one): a warp's 16 rows are 8 of gate's
//                         and the same 8 of up's, so a lane's C fragment holds gate (rows 0-7) and up (rows 8-15) of
//                         the same column and tokens, the epilogue needs no exchange, and as many warps stream the
//                         weights as in gemm_chain
// A dependent launch (kernels/common.cuh, pdl_wait): the weights of the first stages are read before the kernel
// before has finished.
//
// A layer's norms inside its chains (bf16; cuda-backend.ts matmulAddRmsNorm, one node less per norm): a producer (o,
// down: gemm_chain or chain_whole, ChainNormOut) adds its rounded outputs into the residual as add_rms_norm does
// (residual = bf16(residual + y)), writes y = bf16(residual * w) in place of its outputs, and each block the sums of
// squares of its rows' new residual, a float per token (parts[t][block], its lanes' sums in a fixed order). The
// consumer (the next qkv or gate_up: the ring builds, ChainNormIn) sums those in a fixed order to the token's
// r = rsqrt(sum / K + eps) and scales its sums by it before they are rounded: norm(residual) w x^T as
// r (residual w) x^T, the norm's r applied after the dot products instead of before them (other roundings than the
// norm kernel's, not its bits). Those parts reach the consumer's shared memory (after its ring: T * numParts * 4 more
// bytes, gemm-chain.ts chainNormPartsBytes) by cp.async with its first tokens, and the producer's residual rows its
// registers, both right after the wait.
// launch: grid (N / 16 tiles), block 32, shared CHAIN_STAGES * (128 + 64) * 16 bytes
//
// The _fp8 builds take block-FP8 weights (src/model/fp8-linear.ts) and activations quantized by kernels/quant_fp8.cu:
// the same ring of 16-byte pieces, now of 16 e4m3 each, so a stage is 128 k, one scale group, and its four mma are
// m16n8k32 e4m3 (sm_89+). A stage's sums start from zero and join the output's with both scales,
// c += stage * xs[token, group] * ws[row block, group]: W8A8 as cuBLASLt's block-scaled GEMM computes it (not its bits).
// Their scales go to shared memory after the ring: xs [groups][8 tokens] and ws [R][groups] floats, R the tile's
// row blocks (1; 2 for silu_pair) (+ groups * (8 + R) * 4 bytes; gemm-chain.ts). The _s2 builds (block 64; bf16 and
// FP8) split each tile's k between two warps, each with its own ring (twice the warps streaming a narrow weight, each
// chain half as long), and add the two halves in order.
#include "common.cuh"
#include "mma.cuh"
// FP8_BLOCK comes from TypeScript (backend/fp8-linear.ts, through kernel-defines.ts): an _fp8 stage is one scale group
static_assert(FP8_BLOCK == 128, "an _fp8 stage of 16-byte pieces is 128 k, one scale group");
#define QUIRE_DEVICE_ONLY
#include "activation.cu"
#undef QUIRE_DEVICE_ONLY

/** Row and token of accumulator register r of lane's C fragment. */
__device__ __forceinline__ int frag_row(int lane, int r) { return (lane >> 2) + ((r & 2) ? 8 : 0); }
__device__ __forceinline__ int frag_tok(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

/** An _fp8 build's scales: the tokens' [groups, scaleStride] (kernels/quant_fp8.cu) and the weights' [N / 128, wStride]. */
struct ChainScales {
  const float* x;
  const float* w;
  int xStride;
  int wStride;
};

/** A producer's norm epilogue (residual null: none): residual += y; y = bf16(residual * w); parts[t][block]. */
struct ChainNormOut {
  bf16_t* residual;
  const bf16_t* w;
  float* parts;
};
/** A consumer's norm scale (parts null: none): parts [T][numParts] of a ChainNormOut, whose K wide rows it takes. */
struct ChainNormIn {
  const float* parts;
  int numParts;
  float eps;
};

/** Nothing to do after the wait (chain_tile's default hook). */
struct NoHook {
  __device__ __forceinline__ void operator()() const {}
};

/** The parts of `in` for T tokens from global into shared memory (one warp; issued, not waited for). */
__device__ __forceinline__ void norm_parts_async(float* dst, ChainNormIn in, int T) {
  const int lane = threadIdx.x & 31;
  for (int i = lane; i < T * in.numParts / 4; i += 32) cp_async_16(dst + 4 * i, in.parts + 4 * i, true);
}

/**
 * rs[i] = rsqrt(sum of token (2 (lane % 4) + i)'s parts / K + eps), the parts in shared memory (norm_parts_async's,
 * complete and seen by the warp). Lanes 4t..4t+3 sum token t's (lane q: parts q, q + 4, ... in turn, then the four
 * lanes' butterfly), every token at once; the lanes that need a token's scale take it from them.
 */
__device__ __forceinline__ void norm_scales(const float* parts, ChainNormIn in, int T, int K, float rs[2]) {
  const int lane = threadIdx.x & 31, t = lane >> 2;
  float s = 0.f;
  if (t < T)
    for (int i = lane & 3; i < in.numParts; i += 4) s = __fadd_rn(s, parts[t * in.numParts + i]);
  s += __shfl_xor_sync(FULL_MASK, s, 1);
  s += __shfl_xor_sync(FULL_MASK, s, 2);
  const float r = rsqrtf(s / K + in.eps);  // tokens from T: unused
  rs[0] = __shfl_sync(FULL_MASK, r, 8 * (lane & 3));      // token 2 (lane % 4): lane 4 of that
  rs[1] = __shfl_sync(FULL_MASK, r, 8 * (lane & 3) + 4);  // token 2 (lane % 4) + 1
}

/** residual[at] += y (rounded, as add_rms_norm); returns the new residual value (res: its bits read before). */
__device__ __forceinline__ float norm_add(bf16_t* residual, size_t at, unsigned short res, float y) {
  const bf16_t sum = from_float<bf16_t>(to_float(bf16_t{res}) + to_float(from_float<bf16_t>(y)));
  residual[at] = sum;
  return to_float(sum);
}

/**
 * One weight tile of 16 rows (row0..row0+15) against <= 8 tokens; PAIR: rows row0..row0+7, then
 * row0+rowsB..row0+rowsB+7. E: bf16_t, or unsigned char for e4m3 (with `scales`). SPLIT > 1: warp j of the
 * block takes the j-th of SPLIT equal slices of k (whole stages; FP8: whole scale groups), with a ring and scales of
 * its own; c is its slice's sum, from zero (a bf16 split's sums are then not cuBLASLt's; gemm-chain.ts). afterWait
 * runs right after the wait; the cp.async it issues join the group of the early stages' tokens.
 */
template <typename E, int S, int P, int SPLIT = 1, bool PAIR = false, typename Hook = NoHook>
__device__ __forceinline__ void chain_tile(const E* __restrict__ x, const E* __restrict__ w, int T, int N, int K,
                                           int row0, int rowsB, float c[4], ChainScales scales = {},
                                           Hook afterWait = {}) {
  constexpr bool FP8 = sizeof(E) == 1;
  constexpr int PIECE = 16 / sizeof(E), KS = 8 * PIECE;  // elements of a 16-byte piece; k of a stage (8 pieces a row)
  constexpr int WP = 128, SP = WP + 64;  // 16-byte pieces of a stage: 16 rows x KS k, 8 tokens x KS k
  constexpr int SR = PAIR ? 2 : 1;       // FP8: weight scale rows (128-row blocks) the tile touches
  extern __shared__ u32x4 chainShared[];
  const int lane = threadIdx.x & 31;
  const int steps = K / KS / SPLIT;
  const int part = SPLIT > 1 ? threadIdx.x >> 5 : 0;
  u32x4* ring = chainShared + part * (S * SP + (FP8 ? ((8 + SR) * steps + 3) / 4 : 0));  // FP8: scales after a ring
  x += part * steps * KS;
  w += part * steps * KS;
  const E* wsrc[4];
  int wdst[4];
  bool wok[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int p = lane + 32 * i, r = p >> 3, col = p & 7;
    wdst[i] = r * 8 + (col ^ (r & 7));
    const int row = PAIR ? row0 + (r & 7) + (r >> 3) * rowsB : row0 + r;
    wok[i] = row < N;
    wsrc[i] = w + (size_t)min(row, N - 1) * K + col * PIECE;
  }
  const E* xsrc[2];
  int xdst[2];
  bool xok[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int p = lane + 32 * i, r = p >> 3, col = p & 7;
    xok[i] = r < T;
    xsrc[i] = x + (size_t)min(r, T - 1) * K + col * PIECE;
    xdst[i] = WP + r * 8 + (col ^ (r & 7));
  }
  auto issue_w = [&](int s) {
    u32x4* slot = ring + (s % S) * SP;
#pragma unroll
    for (int i = 0; i < 4; i++) cp_async_16_stream(slot + wdst[i], wsrc[i] + s * KS, wok[i]);
  };
  auto issue_x = [&](int s) {
    u32x4* slot = ring + (s % S) * SP;
#pragma unroll
    for (int i = 0; i < 2; i++) cp_async_16(slot + xdst[i], xsrc[i] + s * KS, xok[i]);
  };
  auto issue = [&](int s) {
    if (s < steps) {
      issue_w(s);
      issue_x(s);
    }
    cp_async_commit();
  };
  // The first P stages' weights go before waiting for the kernel before (a dependent launch: they stream while it
  // finishes), their tokens in one group after it, then stages P..S-2 whole; from there the ring runs S - 1 stages
  // ahead. Groups complete in order: stages below P need the first P + 1 groups, a later stage s the first s + 2.
  static_assert(P < S, "the early weights are a part of the ring");
#pragma unroll
  for (int s = 0; s < P; s++) {
    if (s < steps) issue_w(s);
    cp_async_commit();
  }
  float* xScale = reinterpret_cast<float*>(ring + S * SP);  // FP8: [steps][8 tokens], then ws [SR][steps]
  float* wScale = xScale + 8 * steps;
  if constexpr (FP8) {
    for (int i = lane; i < SR * steps; i += 32) {
      const int m = i / steps, g = i % steps;
      wScale[i] = scales.w[(size_t)((row0 + m * rowsB) >> 7) * scales.wStride + part * steps + g];
    }
  }
  pdl_begin();
  afterWait();
  if constexpr (FP8) {
    for (int i = lane; i < 8 * steps; i += 32)
      xScale[i] = (i & 7) < T ? scales.x[(size_t)(part * steps + (i >> 3)) * scales.xStride + (i & 7)] : 0.f;
  }
#pragma unroll
  for (int s = 0; s < P; s++)
    if (s < steps) issue_x(s);
  cp_async_commit();
#pragma unroll
  for (int s = P; s < S - 1; s++) issue(s);
  cp_async_wait<S - 1 - P>();  // of the S groups, the first P + 1: stages 0..P-1 whole
  // A (x4): lanes 0-7 rows 0-7, 8-15 rows 8-15 at a k16's first 8 k; lanes 16-31 the same rows at its last 8.
  const int ar = (lane & 7) + (lane & 8), ah = lane >> 4;
  // B (x4, two k16 at once): lanes 8j..8j+7 the token rows at piece j of the pair's four.
  const int br = lane & 7, bq = lane >> 3;
  c[0] = c[1] = c[2] = c[3] = 0.f;
  for (int s = 0; s < steps; s++) {
    if (s >= P) cp_async_wait<S - 2>();
    __syncwarp();
    issue(s + S - 1);
    const u32x4* slot = ring + (s % S) * SP;
    float cs[4] = {0.f, 0.f, 0.f, 0.f};  // FP8: this stage's (scale group's) sums, from zero
#pragma unroll
    for (int pair = 0; pair < 2; pair++) {
      unsigned b[4];
      ldmatrix_x4(b, slot + WP + br * 8 + ((4 * pair + bq) ^ br));
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int kk = 2 * pair + h;
        unsigned a[4];
        ldmatrix_x4(a, slot + ar * 8 + ((2 * kk + ah) ^ (ar & 7)));
        if constexpr (FP8) mma_e4m3_16832(cs, a, b[2 * h], b[2 * h + 1]);
        else mma_bf16_16816(c, a, b[2 * h], b[2 * h + 1]);
      }
    }
    if constexpr (FP8) {
      const float ws = wScale[s], ws2 = PAIR ? wScale[steps + s] : ws;  // PAIR: rows 8-15's block
#pragma unroll
      for (int r = 0; r < 4; r++) c[r] += cs[r] * (xScale[8 * s + frag_tok(lane, r)] * (r & 2 ? ws2 : ws));
    }
  }
  cp_async_wait<0>();
}

/** SPLIT > 1: warp 0's c becomes the slices' sums added in slice order; false for the other warps (done). */
template <int SPLIT>
__device__ __forceinline__ bool add_slices(float c[4]) {
  if constexpr (SPLIT > 1) {
    __shared__ float slices[SPLIT - 1][32][4];
    const int lane = threadIdx.x & 31, part = threadIdx.x >> 5;
    if (part > 0) {
#pragma unroll
      for (int r = 0; r < 4; r++) slices[part - 1][lane][r] = c[r];
    }
    __syncthreads();
    if (part > 0) return false;
#pragma unroll
    for (int j = 0; j < SPLIT - 1; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) c[r] += slices[j][lane][r];
  }
  return true;
}

/** Where a ring build keeps a consumer's norm parts: after its warps' rings (bf16 stages of 192 pieces). */
template <int S, int SPLIT>
__device__ __forceinline__ float* norm_parts_shared() {
  extern __shared__ u32x4 chainShared[];
  return reinterpret_cast<float*>(chainShared + SPLIT * S * (128 + 64));
}

template <typename E, int S, int P, int SPLIT = 1>
__device__ __forceinline__ void gemm_chain(const E* __restrict__ x, const E* __restrict__ w, bf16_t* __restrict__ y,
                                           const bf16_t* __restrict__ bias, int T, int N, int K,
                                           ChainScales scales = {}, ChainNormOut nout = {}, ChainNormIn nin = {}) {
  constexpr bool NORMS = sizeof(E) == 2;  // the norms' epilogues are the bf16 builds'
  float c[4];
  const int row0 = blockIdx.x * 16;
  const int lane = threadIdx.x & 31;
  float gw[2] = {0.f, 0.f};  // a producer's norm weights at this lane's rows (never change: read before the wait)
  unsigned short res[4] = {0, 0, 0, 0};
  if (NORMS && nout.residual) {
    gw[0] = to_float(nout.w[min(row0 + frag_row(lane, 0), N - 1)]);
    gw[1] = to_float(nout.w[min(row0 + frag_row(lane, 2), N - 1)]);
  }
  float* parts = norm_parts_shared<S, SPLIT>();
  auto afterWait = [&]() {
    if constexpr (NORMS) {
      if (nout.residual && threadIdx.x < 32) {  // warp 0 writes the outputs
#pragma unroll
        for (int r = 0; r < 4; r++) {
          const int row = row0 + frag_row(lane, r), tok = frag_tok(lane, r);
          if (row < N && tok < T) res[r] = nout.residual[(size_t)tok * N + row].bits;
        }
      }
      if (nin.parts && threadIdx.x < 32) norm_parts_async(parts, nin, T);
    }
  };
  chain_tile<E, S, P, SPLIT>(x, w, T, N, K, row0, 0, c, scales, afterWait);
  if (!add_slices<SPLIT>(c)) return;
  float rs[2] = {1.f, 1.f}, sq[2] = {0.f, 0.f};
  if (NORMS && nin.parts) {
    __syncwarp();
    norm_scales(parts, nin, T, K, rs);
  }
#pragma unroll
  for (int r = 0; r < 4; r++) {
    const int row = row0 + frag_row(lane, r), tok = frag_tok(lane, r);
    const float v = NORMS && nin.parts ? __fmul_rn(c[r], rs[r & 1]) : c[r];
    const float out = bias && row < N ? v + to_float(bias[row]) : v;
    if (NORMS && nout.residual) {
      float nr = 0.f;  // the new residual (0 off the tile)
      if (row < N && tok < T) {
        const size_t at = (size_t)tok * N + row;
        nr = norm_add(nout.residual, at, res[r], out);
        y[at] = from_float<bf16_t>(nr * gw[r >> 1]);
      }
      sq[r & 1] = __fmaf_rn(nr, nr, sq[r & 1]);
    } else if (row < N && tok < T) {
      y[(size_t)tok * N + row] = from_float<bf16_t>(out);
    }
  }
  if (NORMS && nout.residual) {  // lanes of one lane % 4 hold a token pair's rows: their sums, lanes 0-3 the totals
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) sq[i] += __shfl_xor_sync(FULL_MASK, sq[i], o);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int tok = 2 * lane + i;
      if (lane < 4 && tok < T) nout.parts[(size_t)tok * gridDim.x + blockIdx.x] = sq[i];
    }
  }
}

template <typename E, int S, int P, int SPLIT = 1>
__device__ __forceinline__ void gemm_chain_silu_pair(const E* __restrict__ x, const E* __restrict__ w,
                                                     bf16_t* __restrict__ y, const bf16_t* __restrict__, int T, int N,
                                                     int K, ChainScales scales = {}, ChainNormIn nin = {}) {
  constexpr bool NORMS = sizeof(E) == 2;
  float c[4];
  const int inter = N / 2, row0 = blockIdx.x * 8;
  float* parts = norm_parts_shared<S, SPLIT>();
  auto afterWait = [&]() {
    if (NORMS && nin.parts && threadIdx.x < 32) norm_parts_async(parts, nin, T);
  };
  chain_tile<E, S, P, SPLIT, true>(x, w, T, N, K, row0, inter, c, scales, afterWait);
  if (!add_slices<SPLIT>(c)) return;
  const int lane = threadIdx.x & 31;
  const int row = row0 + (lane >> 2);
  float rs[2] = {1.f, 1.f};
  if (NORMS && nin.parts) {
    __syncwarp();
    norm_scales(parts, nin, T, K, rs);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {  // registers 0, 1: gate's row, tokens tok and tok + 1; 2, 3: up's, the same tokens
    const int tok = frag_tok(lane, r);
    const float g = NORMS && nin.parts ? __fmul_rn(c[r], rs[r]) : c[r];
    const float u = NORMS && nin.parts ? __fmul_rn(c[r + 2], rs[r]) : c[r + 2];
    if (row < inter && tok < T)
      y[(size_t)tok * inter + row] = from_float<bf16_t>(silu_mul_of(from_float<bf16_t>(g), from_float<bf16_t>(u)));
  }
}

#include "gemm_chain_whole.cuh"

// CHAIN_STAGES stages: 30 KiB of weights in flight per warp, what the decode shapes need (docs/perf-log.md, session 10).
// P = 4 stages read before the kernel before has finished; the _p8 builds read 8, for chains of K >= 4,096
// (gemm-chain.ts; sessions 10 and 15).
// CHAIN_STAGES, the stages of a warp's ring: from TypeScript (gemm-chain.ts, through kernel-defines.ts)
// A bf16 _s2 build's rings (one a warp, SS stages): 8 stages each where P is 4, so that a block's shared memory is
// the unsplit one's; the _p8 builds' chains (K >= 4,096) keep 16. Of an 8-stage ring, P2 = CHAIN_S2_EARLY stages are
// read before the wait (docs/perf-log.md, session 24). QUIRE_KERNEL_DEFINES=CHAIN_S2_EARLY=n moves it.
#ifndef CHAIN_S2_EARLY
#define CHAIN_S2_EARLY 6
#endif
// the bf16 builds' arguments: x, w, y, bias, T, N, K, then a producer's norm (ChainNormOut: residual, normW, normParts;
// residual null for none) and a consumer's (ChainNormIn: inParts, numInParts, eps; inParts null for none)
#define CHAIN_ARGS                                                                                                     \
  const bf16_t *__restrict__ x, const bf16_t *__restrict__ w, bf16_t *__restrict__ y, const bf16_t *__restrict__ bias, \
      int T, int N, int K, bf16_t *__restrict__ normRes, const bf16_t *__restrict__ normW, float *__restrict__ normParts, \
      const float *__restrict__ inParts, int numInParts, float eps
#define NORM_OUT ChainNormOut{normRes, normW, normParts}
#define NORM_IN ChainNormIn{inParts, numInParts, eps}
#define CHAIN_KERNELS(suffix, P, SS, P2)                                                                               \
  extern "C" __global__ void __launch_bounds__(32) gemm_chain##suffix(CHAIN_ARGS) {                                    \
    gemm_chain<bf16_t, CHAIN_STAGES, P>(x, w, y, bias, T, N, K, {}, NORM_OUT, NORM_IN);                                \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(32) gemm_chain_silu_pair##suffix(CHAIN_ARGS) {                          \
    gemm_chain_silu_pair<bf16_t, CHAIN_STAGES, P>(x, w, y, bias, T, N, K, {}, NORM_IN);                                \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(64) gemm_chain##suffix##_s2(CHAIN_ARGS) {                               \
    gemm_chain<bf16_t, SS, P2, 2>(x, w, y, bias, T, N, K, {}, NORM_OUT, NORM_IN);                                      \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(64) gemm_chain_silu_pair##suffix##_s2(CHAIN_ARGS) {                     \
    gemm_chain_silu_pair<bf16_t, SS, P2, 2>(x, w, y, bias, T, N, K, {}, NORM_IN);                                      \
  }
extern "C" __global__ void __launch_bounds__(32) gemm_chain_whole(CHAIN_ARGS) {
  chain_whole<false>(x, w, y, bias, T, N, K, NORM_OUT);
}
extern "C" __global__ void __launch_bounds__(32 * CHAIN_WHOLE_MAX_SPLIT) gemm_chain_whole_split(CHAIN_ARGS) {
  chain_whole<true>(x, w, y, bias, T, N, K, NORM_OUT);
}
CHAIN_KERNELS(, 4, 8, CHAIN_S2_EARLY)
CHAIN_KERNELS(_p8, 8, CHAIN_STAGES, 8)
#undef CHAIN_KERNELS
#undef NORM_OUT
#undef NORM_IN
#undef CHAIN_ARGS
// e4m3 tokens and weights with their scales (ChainScales), no bias
#define FP8_CHAIN_ARGS                                                                                                 \
  const unsigned char *__restrict__ x, const unsigned char *__restrict__ w, bf16_t *__restrict__ y,                   \
      const float *__restrict__ xScales, const float *__restrict__ wScales, int xStride, int wStride, int T, int N, int K
#define FP8_CHAIN_KERNELS(suffix, P)                                                                                   \
  extern "C" __global__ void __launch_bounds__(32) gemm_chain_fp8##suffix(FP8_CHAIN_ARGS) {                            \
    gemm_chain<unsigned char, CHAIN_STAGES, P>(x, w, y, nullptr, T, N, K, {xScales, wScales, xStride, wStride});      \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(64) gemm_chain_fp8##suffix##_s2(FP8_CHAIN_ARGS) {                       \
    gemm_chain<unsigned char, CHAIN_STAGES, P, 2>(x, w, y, nullptr, T, N, K, {xScales, wScales, xStride, wStride});   \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(32) gemm_chain_silu_pair_fp8##suffix(FP8_CHAIN_ARGS) {                  \
    gemm_chain_silu_pair<unsigned char, CHAIN_STAGES, P>(x, w, y, nullptr, T, N, K,                                    \
                                                         {xScales, wScales, xStride, wStride});                        \
  }
FP8_CHAIN_KERNELS(, 4)
FP8_CHAIN_KERNELS(_p8, 8)
#undef FP8_CHAIN_KERNELS
#undef FP8_CHAIN_ARGS
