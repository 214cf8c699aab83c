// Embedding gather and logit-row gather: copies whole rows.
//   embedding:   out[t, :] = table[id, :]          table [vocab, hidden], out [numTokens, hidden];
//                id = ids[t], or prevIds[-ids[t] - 1] for a negative one (the previous step's sampled row: async
//                scheduling launches a step before the host has the tokens of the step before it)
//   embedding_part: the same on a tensor-parallel rank's rows [firstRow, firstRow + numRows) of the vocabulary; an
//                id outside them gives a zero row (the all-reduce after adds the rank that holds it)
//   gather_rows: out[i, :] = x[indices[i], :]      x [numTokens, hidden], out [numRows, hidden]
//   join_column_parts: out[r, c] = parts[c / W][r][c % W] for c < width      parts [P, R, W] (rank order: an
//                all-gather of each tensor-parallel rank's vocabulary columns), out [R, width] (padding dropped)
// Launch: grid (numRows), block 256; threads stride over the hidden dimension (join: over width).
#include "common.cuh"

/** out row = src row `row` (a block per row, threads striding over hidden). */
template <typename T>
__device__ __forceinline__ void copy_row(const T* src, long long row, T* out, int hidden) {
  const T* from = src + row * hidden;
  T* to = out + (long long)blockIdx.x * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) to[i] = from[i];
}

#define INSTANTIATE(suffix, T)                                                                           \
  extern "C" __global__ void embedding_##suffix(const T* table, const int* ids, const int* prevIds, T* out,  \
                                                int hidden) {                                            \
    pdl_begin();                                                                                         \
    const int raw = ids[blockIdx.x];                                                                     \
    copy_row<T>(table, raw >= 0 ? raw : prevIds[-raw - 1], out, hidden);                                 \
  }                                                                                                      \
  extern "C" __global__ void embedding_part_##suffix(const T* table, const int* ids, const int* prevIds, T* out, \
                                                     int hidden, int firstRow, int numRows) {            \
    pdl_begin();                                                                                         \
    const int raw = ids[blockIdx.x];                                                                     \
    const int row = (raw >= 0 ? raw : prevIds[-raw - 1]) - firstRow;                                     \
    if (row >= 0 && row < numRows) {                                                                     \
      copy_row<T>(table, row, out, hidden);                                                              \
    } else {                                                                                             \
      T* to = out + (long long)blockIdx.x * hidden;                                                      \
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) to[i] = from_float<T>(0.0f);                \
    }                                                                                                    \
  }                                                                                                      \
  extern "C" __global__ void gather_rows_##suffix(const T* x, const int* indices, T* out, int hidden) {  \
    pdl_begin();                                                                                         \
    copy_row<T>(x, indices[blockIdx.x], out, hidden);                                                    \
  }                                                                                                      \
  extern "C" __global__ void join_column_parts_##suffix(const T* parts, T* out, int numRows, int partWidth, \
                                                        int width) {                                     \
    pdl_begin();                                                                                         \
    const long long r = blockIdx.x;                                                                      \
    for (int c = threadIdx.x; c < width; c += blockDim.x) {                                              \
      out[r * width + c] = parts[((long long)(c / partWidth) * numRows + r) * partWidth + c % partWidth]; \
    }                                                                                                    \
  }

INSTANTIATE(bf16, bf16_t)
