// One-shot all-reduce over peer memory (tensor parallelism's small all-reduces; peer-allreduce.ts plans and
// launches it, and says why it is hand-written). Every rank runs the same grid at the same point of its stream:
//
//   peer_all_reduce: x[i] = sum over ranks r (in order 0, 1, ...) of rank r's x[i], in f32, rounded once; x [n], in
//             place. Each rank owns a region (regions[r], mapped on every rank): [flags][counters][buffer 0][buffer 1].
//             Block b of each rank
//               1. copies its 16-byte chunks of x into its own buffer (call parity: counter & 1),
//               2. raises its flag in every peer's region (a release store at system scope, after a system fence),
//               3. waits until every peer's block b has raised the same call's flag in its region (acquire loads),
//               4. sums its chunks from every rank's buffer and writes them to x.
//             Chunk c always falls to block (c / blockDim) % gridDim, whatever n, so block b reads only what the peers'
//             blocks b wrote. Two buffers make one barrier enough: a rank's block b rewrites a buffer two calls
//             later, after passing the next call's barrier, which each peer's block b enters only once its kernel
//             of the call before (the one that read that buffer) has ended, as kernels in a stream do.
//             A block with no chunk returns at once, on every rank alike (its counter stays in step).
//             A peer that never arrives (it died) traps after PEER_AR_TIMEOUT_NS, so the step fails instead of
//             spinning for ever; the wait before a rank's first all-reduce includes its peers' first kernel compiles.
//             launch: grid PEER_AR_BLOCKS, block PEER_AR_THREADS; n * sizeof(T) a multiple of 16, x 16-byte aligned.
#include "common.cuh"

#define PEER_AR_TIMEOUT_NS 120000000000ull

__device__ __forceinline__ void store_release_sys(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned load_acquire_sys(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/** A 16-byte chunk of a peer's buffer from L2 (not L1: the same address holds another call's data later). */
__device__ __forceinline__ uint4 load_cg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/**
 * Raises this block's flag for `epoch` in every peer's region and waits until every peer's same block has raised its
 * flag in this rank's (`mine`). The block's staged stores come before it (a system fence, then the barrier) and its
 * loads of the peers' buffers after it.
 */
__device__ __forceinline__ void peer_barrier(const unsigned long long* regions, char* mine, int rank, int size,
                                             unsigned epoch) {
  __threadfence_system();
  __syncthreads();
  const int peer = threadIdx.x;
  const int b = blockIdx.x;
  if (peer < size && peer != rank) {
    unsigned* flags = reinterpret_cast<unsigned*>(regions[peer]);
    store_release_sys(flags + b * PEER_AR_MAX_RANKS + rank, epoch);
    const unsigned* arrived = reinterpret_cast<const unsigned*>(mine) + b * PEER_AR_MAX_RANKS + peer;
    const unsigned long long start = global_ns();
    // counters only grow; a peer may already be one call further (it raises the next flag before waiting on ours)
    while ((int)(load_acquire_sys(arrived) - epoch) < 0) {
      if (global_ns() - start > PEER_AR_TIMEOUT_NS) __trap();
    }
  }
  __syncthreads();
}

template <typename T>
__device__ __forceinline__ void peer_all_reduce(T* x, int n, const unsigned long long* regions, int rank, int size,
                                                int capBytes) {
  constexpr int VEC = 16 / (int)sizeof(T);
  const int chunks = n / VEC;
  const int b = blockIdx.x;
  if (b * blockDim.x >= chunks) return;
  char* mine = reinterpret_cast<char*>(regions[rank]);
  unsigned* counters = reinterpret_cast<unsigned*>(mine + PEER_AR_EPOCH_OFFSET);
  const unsigned epoch = counters[b] + 1;  // every thread reads it before thread 0 writes it, past the barrier
  const long long offset = PEER_AR_DATA_OFFSET + (long long)(epoch & 1) * capBytes;
  const int stride = gridDim.x * blockDim.x;
  uint4* own = reinterpret_cast<uint4*>(mine + offset);
  const uint4* in = reinterpret_cast<const uint4*>(x);
  for (int c = b * blockDim.x + threadIdx.x; c < chunks; c += stride) own[c] = in[c];
  peer_barrier(regions, mine, rank, size, epoch);
  if (threadIdx.x == 0) counters[b] = epoch;
  union Pack { uint4 raw; T v[VEC]; };
  for (int c = b * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    float acc[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = 0.f;
    for (int r = 0; r < size; r++) {
      Pack p;
      p.raw = load_cg(reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(regions[r]) + offset) + c);
#pragma unroll
      for (int e = 0; e < VEC; e++) acc[e] += to_float(p.v[e]);
    }
    Pack o;
#pragma unroll
    for (int e = 0; e < VEC; e++) o.v[e] = from_float<T>(acc[e]);
    reinterpret_cast<uint4*>(x)[c] = o.raw;
  }
}

#define INSTANTIATE(suffix, T)                                                                                  \
  extern "C" __global__ void peer_all_reduce_##suffix(T* x, int n, const unsigned long long* regions, int rank, \
                                                      int size, int capBytes) {                                 \
    peer_all_reduce<T>(x, n, regions, rank, size, capBytes);                                                    \
  }
INSTANTIATE(bf16, bf16_t)
INSTANTIATE(f32, float)
