// The CUDA a kernel file's device code uses, on the CPU (test/kernels/deltanet-emulated.test.ts): a block's threads
// are std::threads that meet at std::barriers (__syncthreads: the block's, __syncwarp: the warp's), shuffles pass
// through an array between two warp barriers, __shared__ is a function's static (one block runs at a time), and
// DYNAMIC_SHARED one static buffer. Stands in for kernels/common.cuh, whose PTX and intrinsics g++ cannot take.
// Enough for kernels/deltanet.cu; fmaf, expf, log1pf are the host's (the kernels' arithmetic order is what is
// checked, not the device's libm).
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
using std::max;
using std::min;

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __shared__ static
#define FULL_MASK 0xffffffffu
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(emu::dynamicShared)

struct Dim3 {
  int x = 0, y = 0, z = 0;
};
thread_local Dim3 threadIdx, blockIdx;
Dim3 blockDim;

namespace emu {
constexpr int MAX_THREADS = 1024;
std::barrier<>* block = nullptr;
std::barrier<>* warps[MAX_THREADS / 32];
float lanes[MAX_THREADS];
alignas(16) unsigned char dynamicShared[228 * 1024];

/** Runs `thread` on every thread of every block of `grid`, one block at a time. */
inline void launch(Dim3 grid, int threads, const std::function<void()>& thread) {
  blockDim = {threads, 1, 1};
  for (int z = 0; z < grid.z; z++) {
    for (int y = 0; y < grid.y; y++) {
      for (int x = 0; x < grid.x; x++) {
        std::barrier<> all(threads);
        block = &all;
        const int numWarps = (threads + 31) / 32;
        for (int w = 0; w < numWarps; w++) warps[w] = new std::barrier<>(std::min(32, threads - 32 * w));
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; t++) {
          ts.emplace_back([&, t] {
            threadIdx = {t, 0, 0};
            blockIdx = {x, y, z};
            thread();
          });
        }
        for (auto& t : ts) t.join();
        for (int w = 0; w < numWarps; w++) delete warps[w];
      }
    }
  }
}
}  // namespace emu

inline void __syncthreads() { emu::block->arrive_and_wait(); }
inline void __syncwarp(unsigned = FULL_MASK) { emu::warps[threadIdx.x / 32]->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int lane) {
  const int t = threadIdx.x;
  emu::lanes[t] = v;
  __syncwarp();
  const float other = emu::lanes[(t & ~31) | ((t & 31) ^ lane)];
  __syncwarp();
  return other;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};

struct bf16_t {
  unsigned short bits;
};
inline float to_float(bf16_t v) { return __uint_as_float(((unsigned)v.bits) << 16); }
inline float to_float(float v) { return v; }
template <typename T> T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline bf16_t from_float<bf16_t>(float v) {  // round to nearest even (finite inputs)
  const unsigned u = __float_as_uint(v);
  return bf16_t{(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }

inline void pdl_trigger_if(bool) {}
inline void pdl_wait_then_trigger(bool) {}
inline void pdl_begin() {}
inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  return v;
}

// kernels/mma.cuh's warp-wide tensor-core pieces, by their documented fragments (g = lane / 4, t = lane % 4): every
// lane leaves its operands in an array between two warp barriers and takes what its own registers hold. The sums
// run in k order in float (the device's order within an MMA is its own: the checks hold the kernels to a tolerance).
struct alignas(16) u32x4 {
  unsigned x, y, z, w;
};
namespace emu {
const void* rowAddrs[MAX_THREADS];
unsigned frags[MAX_THREADS][6];
}  // namespace emu

inline unsigned pack_bf16x2(float lo, float hi) {
  return (unsigned)from_float<bf16_t>(lo).bits | ((unsigned)from_float<bf16_t>(hi).bits << 16);
}
inline float bf16_half(unsigned r, int high) { return __uint_as_float(high ? r & 0xffff0000u : r << 16); }

inline void ldmatrix_x4_impl(unsigned r[4], const void* rowAddr, bool trans) {
  const int t = threadIdx.x, base = t & ~31, lane = t & 31, g = lane >> 2, q = lane & 3;
  emu::rowAddrs[t] = rowAddr;
  __syncwarp();
  for (int i = 0; i < 4; i++) {
    const unsigned short* rows[8];
    for (int j = 0; j < 8; j++) rows[j] = static_cast<const unsigned short*>(emu::rowAddrs[base + 8 * i + j]);
    // plain: (row g, cols 2q, 2q + 1); transposed: (rows 2q, 2q + 1, col g); the lower index in the low half
    const unsigned short lo = trans ? rows[2 * q][g] : rows[g][2 * q];
    const unsigned short hi = trans ? rows[2 * q + 1][g] : rows[g][2 * q + 1];
    r[i] = (unsigned)lo | ((unsigned)hi << 16);
  }
  __syncwarp();
}
inline void ldmatrix_x4(unsigned r[4], const void* rowAddr) { ldmatrix_x4_impl(r, rowAddr, false); }
inline void ldmatrix_x4_trans(unsigned r[4], const void* rowAddr) { ldmatrix_x4_impl(r, rowAddr, true); }

/** c += a * b on one m16n8k16 tile of bf16. */
inline void mma_bf16_16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
  const int t = threadIdx.x, base = t & ~31, lane = t & 31, g = lane >> 2, q = lane & 3;
  unsigned* mine = emu::frags[t];
  mine[0] = a[0], mine[1] = a[1], mine[2] = a[2], mine[3] = a[3], mine[4] = b0, mine[5] = b1;
  __syncwarp();
  // A (m, k): lane (m % 8) * 4 + (k % 8) / 2, register (m >= 8) + 2 (k >= 8), half k % 2
  auto A = [&](int m, int k) {
    return bf16_half(emu::frags[base + (m % 8) * 4 + (k % 8) / 2][(m >= 8) + 2 * (k >= 8)], k % 2);
  };
  // B (k, n): lane n * 4 + (k % 8) / 2, register b0 or b1 (k >= 8), half k % 2
  auto B = [&](int k, int n) { return bf16_half(emu::frags[base + n * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2); };
  float d[4];
  for (int e = 0; e < 4; e++) {
    const int m = g + 8 * (e >> 1), n = 2 * q + (e & 1);
    float acc = 0.f;
    for (int k = 0; k < 16; k++) acc = fmaf(A(m, k), B(k, n), acc);
    d[e] = c[e] + acc;
  }
  __syncwarp();
  for (int e = 0; e < 4; e++) c[e] = d[e];
}
