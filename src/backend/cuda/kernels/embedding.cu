// Embedding gather and logit-row gather: copies whole rows.
//   embedding:   out[t, :] = table[ids[t], :]      table [vocab, hidden], out [numTokens, hidden]
//   gather_rows: out[i, :] = x[indices[i], :]      x [numTokens, hidden], out [numRows, hidden]
// Launch: grid (numRows), block 256; threads stride over the hidden dimension.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void gather_rows(const T* src, const int* indices, T* out, int hidden) {
  const long long row = indices[blockIdx.x];
  const T* from = src + row * hidden;
  T* to = out + (long long)blockIdx.x * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) to[i] = from[i];
}

#define INSTANTIATE(suffix, T)                                                                          \
  extern "C" __global__ void embedding_##suffix(const T* table, const int* ids, T* out, int hidden) {  \
    gather_rows<T>(table, ids, out, hidden);                                                            \
  }                                                                                                     \
  extern "C" __global__ void gather_rows_##suffix(const T* x, const int* indices, T* out, int hidden) { \
    gather_rows<T>(x, indices, out, hidden);                                                            \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
