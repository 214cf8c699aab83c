// Embedding gather and logit-row gather: copies whole rows.
//   embedding:   out[t, :] = table[id, :]          table [vocab, hidden], out [numTokens, hidden];
//                id = ids[t], or prevIds[-ids[t] - 1] for a negative one (the previous step's sampled row: async
//                scheduling launches a step before the host has the tokens of the step before it)
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
  extern "C" __global__ void embedding_##suffix(const T* table, const int* ids, const int* prevIds, T* out,  \
                                                int hidden) {                                           \
    const int raw = ids[blockIdx.x];                                                                    \
    const long long id = raw >= 0 ? raw : prevIds[-raw - 1];                                            \
    const T* from = table + id * hidden;                                                                \
    T* to = out + (long long)blockIdx.x * hidden;                                                       \
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) to[i] = from[i];                             \
  }                                                                                                     \
  extern "C" __global__ void gather_rows_##suffix(const T* x, const int* indices, T* out, int hidden) { \
    gather_rows<T>(x, indices, out, hidden);                                                            \
  }

INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
