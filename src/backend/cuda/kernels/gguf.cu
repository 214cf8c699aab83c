// GEMMs on GGUF weights kept as llama.cpp's blocks (gguf-layout.ts: block bodies, and the d of Q4_0, Q8_0 and Q6_K
// blocks in an array of their own), read through kernels/gguf_decode.cuh's formats:
//
//   gguf_quantize_q8: a step's activations x [T, K] (bf16) as q8 blocks of 32 (gguf_q8.cuh: xq int8 [T, K], xds
//     [T, K / 32] pairs of scale and sum), the GEMV's input. A thread 8 values, 4 threads a block.
//     launch: grid (ceil(T * K / 8 / 256)), block 256
//   gguf_gemv_<fmt>_m<M>: y[t, c] = sum_k x[t, k] w[c, k] (+ bias[c]) for the T <= M tokens of a decode step, on x
//     as q8, c < rows of one segment of one format (y and bias already offset to its first column, y's rows ldy
//     apart). `split` warps of a block (1, 2 or 4: gguf-gemv-plan.ts, from the segment's rows and K) take the same
//     GGUF_GEMV_ROWS weight rows; a row is K / 32 pieces of 32 weights (gguf_decode.cuh: 16 or 32 bytes of blocks
//     each, and their scales), lane l of the block's warp s taking pieces 32 s + l, + 32 split, ..., so every lane
//     works from K = 1024 split up and a warp's loads of a piece are 512 to 1024 contiguous bytes. A lane loads
//     GGUF_GEMV_DEPTH pieces of each of its rows before it multiplies any (the first before it waits for the kernel
//     before: weights never change), then decodes each piece once (F::piece: its bytes as packed integers, its
//     scales, d) and for each token reads the piece's two runs of 16 q8 activations once for all its rows and adds
//     the decoded piece's dot_piece (integer dp4a sums, scaled in f32) to the row's sum. Weights are read and decoded
//     once for all tokens: a token costs its dp4a and a few f32 operations a piece (llama.cpp's mmvq shares a
//     block's decode across its ncols_y columns so).
//     launch: grid (ceil(rows / (GGUF_GEMV_WARPS / split * GGUF_GEMV_ROWS))), block GGUF_GEMV_WARPS * 32
//   gguf_dequant_<fmt>: out[r, k] = bf16(w[r, k]) for rows of one segment: a lane decodes a unit into its warp's
//     shared-memory stage, and the warp stores its 32 units as one contiguous run, 512 bytes a store.
//     launch: grid (ceil(rows * K / UNIT / (GGUF_DEQUANT_WARPS * 32))), block GGUF_DEQUANT_WARPS * 32
//   gguf_copy_columns: dst[t, c] = src[t, c] for src [T, w] into columns of dst (rows ldDst apart).
//     launch: grid (ceil(T * w / 256)), block 256
//   gguf_split_blocks: stored blocks (blockBytes each, d at dOffset) -> the device layout's bodies (the block less its
//     2 bytes of d) and scales (gguf-layout.ts), a thread a body byte and grid-strided. Done here, not on the host: a
//     Q8_0 8B model is 256 M blocks of 34 bytes, which a host loop took most of a minute to reorder (session 36).
//     launch: grid (min(ceil(numBlocks * bodyBytes / 256), 65535 * 4)), block 256
//
// Why a hand-written GEMV: cuBLASLt has no GEMM on these block formats, and dequantizing a weight to bf16 for a step
// of a few tokens reads its blocks, writes 2 bytes a weight and reads them back: several times the bytes of the
// blocks, where the GEMV reads the blocks once. Its activations are quantized to q8 as llama.cpp's mmvq does, so a
// product is integer work (a dp4a per 4 weights and token) and the decode of a piece is shared by all tokens; the
// result differs from dequantized weights times bf16 activations by that quantization (test/gpu/gguf-linear.test.ts
// compares it with a CPU model of the same quantization).
//
// The sums' order is fixed by K and the split (itself chosen from the segment's rows and K): a token's q8 blocks
// depend on its own row only; each lane adds its pieces' f32 contributions in piece order (gguf_decode.cuh's
// dot_piece fixes each one's f32 operations); the lanes' sums meet in warp_sum's fixed butterfly, the split warps'
// sums in warp order; the bias is added last. Neither T, nor the other tokens, nor which block takes a row changes a
// bit of a token's output.
//
// Larger steps (prompt chunks) dequantize the weight to a bf16 scratch and run the bf16 GEMM on it (cuBLASLt:
// gguf-gemm.ts), not tensor-core tiles decoded in shared memory: the dequantization is one more pass over the weight
// (its blocks read, bf16 written and read back), small beside a chunk's GEMM of hundreds of tokens, and cuBLASLt's
// GEMM is already tuned for every shape. A kernel that decodes tiles into an mma pipeline is the lever left.
#include "common.cuh"
#include "gguf_decode.cuh"
#include "gguf_q8.cuh"

static_assert(GgufQ4_0::UNIT == GGUF_UNIT_Q4_0 && GgufQ8_0::UNIT == GGUF_UNIT_Q8_0 && GgufQ4_K::UNIT == GGUF_UNIT_Q4_K &&
                  GgufQ5_K::UNIT == GGUF_UNIT_Q5_K && GgufQ6_K::UNIT == GGUF_UNIT_Q6_K,
              "gguf-layout.ts's unitElems are the decoders' UNIT");

// Pieces a lane loads for each of its rows before it computes any: the loads in flight a lane keeps. Variants to
// measure come through QUIRE_KERNEL_DEFINES (GGUF_GEMV_DEPTH=4), as do the blocks a SM the launch bounds ask
// registers for: 3 keeps every build unspilled (ptxas, sm_90: 64 to 133 registers with the pieces decoded once).
#ifndef GGUF_GEMV_DEPTH
#define GGUF_GEMV_DEPTH 2
#endif
#ifndef GGUF_GEMV_MIN_BLOCKS
#define GGUF_GEMV_MIN_BLOCKS 3
#endif

/** 16 bytes of weights (16-byte aligned), read through the non-coherent cache: they never change. */
__device__ __forceinline__ void gguf_load16(const unsigned char* p, unsigned* w) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

/** Unit u of a row: its pieces loaded into w, and the decoder's context. */
template <class F>
__device__ __forceinline__ typename F::Ctx gguf_load_unit(const unsigned char* rowBody, const unsigned short* rowScales,
                                                          int u, unsigned w[F::VECS * 4]) {
  constexpr int unitsPerBlock = F::BLOCK / F::UNIT;
  const int b = u / unitsPerBlock, j = u % unitsPerBlock;
  const unsigned char* block = rowBody + (long long)b * F::BODY;
#pragma unroll
  for (int v = 0; v < F::VECS; v++) gguf_load16(block + F::vec_offset(j, v), w + 4 * v);
  const float d = F::HAS_D ? gguf_f16_to_float(rowScales[b]) : 0.f;
  return F::prepare(w, d, j);
}

extern "C" __global__ void __launch_bounds__(256)
    gguf_quantize_q8(const bf16_t* __restrict__ x, signed char* __restrict__ xq, int2* __restrict__ xds, int numGroups) {
  pdl_begin();
  const int g = blockIdx.x * blockDim.x + threadIdx.x;  // values 8g..8g+7 of the flat [T, K] (K % 32 == 0)
  const bool active = g < numGroups;
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (active) {
    const uint4 raw = *reinterpret_cast<const uint4*>(x + 8LL * g);
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
      v[2 * e] = __uint_as_float(w[e] << 16);
      v[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
  }
  gguf_q8_store8(v, active, xq + 8LL * g, xds + g / 4);
}

template <class F, int M>
__device__ __forceinline__ void gguf_gemv(const unsigned char* __restrict__ body, const unsigned short* __restrict__ scales,
                                          const signed char* __restrict__ xq, const int2* __restrict__ xds,
                                          bf16_t* __restrict__ y, const bf16_t* __restrict__ bias, int T, int rows, int K,
                                          int ldy, int split) {
  constexpr int R = GGUF_GEMV_ROWS, DEPTH = GGUF_GEMV_DEPTH, WARPS = GGUF_GEMV_WARPS;
  static_assert(M * R <= 32, "a lane of a split row's first warp adds up each (token, row) sum");
  __shared__ float partial[WARPS][M][R];  // split > 1: each warp's sums of its share of the rows' pieces
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % split;  // which of the split warps on these rows: pieces 32 part + lane, + 32 split, ...
  const int row0 = (blockIdx.x * (WARPS / split) + warp / split) * R;
  const int blocksPerRow = K / F::BLOCK, pieces = K / 32, stride = 32 * split;
  // rows past the segment's end read its last row (their sums are never written), so no load needs a guard and every
  // warp of the block reaches the barrier of the split sums
  const unsigned char* rowBody[R];
  const unsigned short* rowScales[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    const long long row = min(row0 + r, rows - 1);
    rowBody[r] = body + row * blocksPerRow * F::BODY;
    rowScales[r] = F::HAS_D ? scales + row * blocksPerRow : nullptr;
  }
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; m++) {
#pragma unroll
    for (int r = 0; r < R; r++) acc[m][r] = 0.f;
  }
  bool waited = false;
  for (int p0 = 32 * part + lane; p0 < pieces; p0 += stride * DEPTH) {
    unsigned w[DEPTH][R][F::PIECE_VECS * 4];
    float d[DEPTH][R];
#pragma unroll
    for (int i = 0; i < DEPTH; i++) {
      const int p = p0 + stride * i;
      if (p >= pieces) break;
      const int b = p / F::PIECES, q = p % F::PIECES;
#pragma unroll
      for (int r = 0; r < R; r++) {
#pragma unroll
        for (int v = 0; v < F::PIECE_VECS; v++) gguf_load16(rowBody[r] + (long long)b * F::BODY + F::piece_vec(q, v), w[i][r] + 4 * v);
        d[i][r] = F::HAS_D ? gguf_f16_to_float(__ldg(rowScales[r] + b)) : 0.f;
      }
    }
    if (!waited) {  // the first pieces' weights are on their way while the kernel before finishes
      pdl_wait_then_trigger(false);
      waited = true;
    }
#pragma unroll
    for (int i = 0; i < DEPTH; i++) {
      const int p = p0 + stride * i;
      if (p >= pieces) break;
      const int b = p / F::PIECES, q = p % F::PIECES;
      const int s0 = b * F::BLOCK + F::run_start(q, 0), s1 = b * F::BLOCK + F::run_start(q, 1);
      // each row's piece decoded once (its bytes, scales and d), then met by every token's runs: the decode's
      // integer and f16 work is not repeated per token, and each token's activations serve all R rows
      typename F::Piece pc[R];
#pragma unroll
      for (int r = 0; r < R; r++) pc[r] = F::piece(w[i][r], d[i][r], q);
#pragma unroll
      for (int m = 0; m < M; m++) {
        if (m >= T) break;
        const signed char* xr = xq + (long long)m * K;
        const int4 a = *reinterpret_cast<const int4*>(xr + s0);
        const int4 c = *reinterpret_cast<const int4*>(xr + s1);
        const int u[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        const int2* xb = xds + (long long)m * pieces;
        const int2 e0 = xb[s0 / 32];
        const int2 e1 = F::X_BLOCKS == 2 ? xb[s1 / 32] : e0;
        const float xd[2] = {__int_as_float(e0.x), __int_as_float(e1.x)};
        const int xs[2] = {e0.y, e1.y};
#pragma unroll
        for (int r = 0; r < R; r++) acc[m][r] += F::dot_piece(pc[r], u, xd, xs);
      }
    }
  }
  if (!waited) pdl_wait_then_trigger(false);  // a lane with no piece (K < 1024) still writes after the wait
  // a row's sum: each warp's lanes in warp_sum's butterfly, then (split > 1) the warps' sums in part order, then the
  // bias: fixed by (rows, K) through split, never by T
#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int m = 0; m < M; m++) acc[m][r] = warp_sum(acc[m][r]);
  }
  if (split > 1) {
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; m++) {
#pragma unroll
        for (int r = 0; r < R; r++) partial[warp][m][r] = acc[m][r];
      }
    }
    __syncthreads();
    if (part != 0 || lane >= M * R) return;
    const int m = lane / R, r = lane % R;
    float sum = partial[warp][m][r];
    for (int k = 1; k < split; k++) sum += partial[warp + k][m][r];
    const bool valid = row0 + r < rows && m < T;
    if (valid) y[(long long)m * ldy + row0 + r] = from_float<bf16_t>(sum + (bias ? to_float(bias[row0 + r]) : 0.f));
    return;
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    const bool valid = row0 + r < rows;
    const float b = bias && valid ? to_float(bias[row0 + r]) : 0.f;
#pragma unroll
    for (int m = 0; m < M; m++) {
      if (lane == 0 && m < T && valid) y[(long long)m * ldy + row0 + r] = from_float<bf16_t>(acc[m][r] + b);
    }
  }
}

template <class F>
__device__ __forceinline__ void gguf_dequant(const unsigned char* __restrict__ body,
                                             const unsigned short* __restrict__ scales, bf16_t* __restrict__ out,
                                             int rows, int K) {
  // A lane decodes a unit (its context prepared once for UNIT values) into the warp's stage; the warp then stores its
  // 32 units' output, one contiguous run (out's rows are K apart, so unit `item` starts at item * UNIT), a 16-byte
  // chunk a lane and 512 contiguous bytes a store. Stored straight from the lanes, each store would put 16 bytes in
  // each of 32 lines UNIT * 2 bytes apart: twice the sectors a byte, and 4 to 16 partial writes a line for L2 to merge.
  // A unit's row in the stage is one chunk longer than it, so the 8 lanes of a store phase (16 bytes each) fall in
  // different banks.
  constexpr int CHUNKS = F::UNIT / 8, PITCH = CHUNKS + 1;
  __shared__ uint4 stage[GGUF_DEQUANT_WARPS][32 * PITCH];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int units = K / F::UNIT;
  const long long total = (long long)rows * units;
  const long long first = ((long long)blockIdx.x * GGUF_DEQUANT_WARPS + warp) * 32, item = first + lane;
  const int blocksPerRow = K / F::BLOCK;
  unsigned w[F::VECS * 4];
  typename F::Ctx c{};
  if (item < total) {  // the weights never change: loaded before the wait, under the kernel before's tail
    const int row = (int)(item / units), u = (int)(item % units);
    c = gguf_load_unit<F>(body + (long long)row * blocksPerRow * F::BODY,
                          F::HAS_D ? scales + (long long)row * blocksPerRow : nullptr, u, w);
  }
  pdl_begin();  // the scratch may still be read by the GEMM before (the previous slice of the same weight)
  if (first >= total) return;
  if (item < total) {
#pragma unroll
    for (int i = 0; i < CHUNKS; i++) {
      float wf[8];
      F::decode8(w, c, i, wf);
      unsigned packed[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        packed[e] = (unsigned)from_float<bf16_t>(wf[2 * e]).bits | ((unsigned)from_float<bf16_t>(wf[2 * e + 1]).bits << 16);
      }
      stage[warp][lane * PITCH + i] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  }
  __syncwarp();
  const int n = (int)min(32LL, total - first) * CHUNKS;
  uint4* o = reinterpret_cast<uint4*>(out + first * F::UNIT);
  for (int k = lane; k < n; k += 32) o[k] = stage[warp][(k / CHUNKS) * PITCH + k % CHUNKS];
}

#define GGUF_GEMV_ARGS                                                                                         \
  const unsigned char *body, const unsigned short *scales, const signed char *xq, const int2 *xds, bf16_t *y, \
      const bf16_t *bias, int T, int rows, int K, int ldy, int split
#define GGUF_GEMV_BUILD(fmt, F, M)                                                                                        \
  extern "C" __global__ void __launch_bounds__(GGUF_GEMV_WARPS * 32, GGUF_GEMV_MIN_BLOCKS)                          \
      gguf_gemv_##fmt##_m##M(GGUF_GEMV_ARGS) {                                                                          \
    gguf_gemv<F, M>(body, scales, xq, xds, y, bias, T, rows, K, ldy, split);                                                    \
  }
#define GGUF_FORMAT(fmt, F)                                                                                              \
  GGUF_GEMV_TOKENS(GGUF_GEMV_BUILD, fmt, F)                                                                              \
  extern "C" __global__ void __launch_bounds__(GGUF_DEQUANT_WARPS * 32)                                                                      \
      gguf_dequant_##fmt(const unsigned char* body, const unsigned short* scales, bf16_t* out, int rows, int K) {      \
    gguf_dequant<F>(body, scales, out, rows, K);                                                                         \
  }
GGUF_FORMAT(q4_0, GgufQ4_0)
GGUF_FORMAT(q8_0, GgufQ8_0)
GGUF_FORMAT(q4_k, GgufQ4_K)
GGUF_FORMAT(q5_k, GgufQ5_K)
GGUF_FORMAT(q6_k, GgufQ6_K)

extern "C" __global__ void __launch_bounds__(256)
    gguf_copy_columns(const bf16_t* __restrict__ src, bf16_t* __restrict__ dst, int T, int width, int ldDst) {
  pdl_begin();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)T * width) return;
  const long long t = i / width, c = i % width;
  dst[t * ldDst + c] = src[i];
}

extern "C" __global__ void __launch_bounds__(256)
    gguf_split_blocks(const unsigned char* __restrict__ in, unsigned char* __restrict__ body,
                      unsigned char* __restrict__ scales, int numBlocks, int blockBytes, int dOffset) {
  pdl_begin();
  const int bodyBytes = blockBytes - 2;
  const long long total = (long long)numBlocks * bodyBytes;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const long long b = i / bodyBytes;
    const int j = (int)(i - b * bodyBytes);
    const unsigned char* block = in + b * blockBytes;
    body[i] = block[j < dOffset ? j : j + 2];
    if (j < 2) scales[2 * b + j] = block[dOffset + j];
  }
}

