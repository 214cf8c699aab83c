// The device helpers the gated DeltaNet rule's kernel files share (deltanet.cu, deltanet_chunked.cu: separate files, so that a build only its knob uses is compiled, by NVRTC at first use, only where it is used):
// a token's inputs and their norms, decay and beta, a state's columns, and the dependent-launch switches' defaults
// (deltanet.cu's header says what each does).
#pragma once
#include "common.cuh"

#ifndef DELTANET_TRIGGER_EARLY
#define DELTANET_TRIGGER_EARLY 0
#endif
#ifndef DELTANET_READ_EARLY
#define DELTANET_READ_EARLY 0
#endif

/** One token's inputs of a warp's columns: its key head's q and k (lane's DK / 32 each), v_j, and the gate inputs. */
template <int DK>
struct TokenIn {
  float q[DK / 32], k[DK / 32];
  float v, a, b;
};

template <typename T, int DK, bool CONV_ROW>
__device__ __forceinline__ void load_token(const T* conv, const T* ba, int ldba, long long t, int C, int Hk, int Hv,
                                           int Dv, int kh, int h, int j, TokenIn<DK>& in) {
  const int lane = threadIdx.x & 31;
  // CONV_ROW: conv is the block's row of its key head's q, k and its v head's v (the fused decode kernel)
  const T* row = CONV_ROW ? conv : conv + t * C;
  const int qAt = CONV_ROW ? 0 : kh * DK, kAt = CONV_ROW ? DK : (Hk + kh) * DK;
  const int vAt = CONV_ROW ? 2 * DK : 2 * Hk * DK + h * Dv;
#pragma unroll
  for (int i = 0; i < DK / 32; i++) {
    in.q[i] = to_float(row[qAt + lane + 32 * i]);
    in.k[i] = to_float(row[kAt + lane + 32 * i]);
  }
  in.v = j < Dv ? to_float(row[vAt + j]) : 0.f;
  in.b = to_float(ba[t * ldba + h]);
  in.a = to_float(ba[t * ldba + Hv + h]);
}

/** 1 / sqrt(sum of squares + 1e-6) of a head spread DK / 32 a lane (transformers' l2norm, as FLA computes it). */
template <int DK>
__device__ __forceinline__ float l2_inv(const float* x) {
  float p = 0.f;
#pragma unroll
  for (int i = 0; i < DK / 32; i++) p = fmaf(x[i], x[i], p);
  return __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(warp_sum(p), 1e-6f)));
}

/** torch's softplus (beta 1, threshold 20). */
__device__ __forceinline__ float softplus(float v) { return v > 20.f ? v : log1pf(expf(v)); }

/** Sum over the lanes that share lane's column (lanes COLS apart): the parts of a column's dot product. */
template <int COLS>
__device__ __forceinline__ float column_sum(float v) {
#pragma unroll
  for (int o = COLS; o < 32; o <<= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  return v;
}

/** Where v head h's state of `slot` starts (elements of ST), or null (no slot: a padding row). */
template <typename ST, int DK>
__device__ __forceinline__ ST* head_state(float* state, int slot, int slotFloats, int ssmAt, int h, int Dv) {
  return slot >= 0 ? reinterpret_cast<ST*>(state + (long long)slot * slotFloats) + ssmAt + (long long)h * DK * Dv
                   : nullptr;
}

/** A lane's rows part + PARTS i of column j (zeros without a state, past Dv, or where `read` is false: position 0). */
template <int DK, typename ST>
__device__ __forceinline__ void load_column(const ST* S, int part, int j, int Dv, bool read, float* col) {
  constexpr int PARTS = DK / 32;
#pragma unroll
  for (int i = 0; i < 32; i++) {
    col[i] = S != nullptr && read && j < Dv ? to_float(S[(long long)(part + PARTS * i) * Dv + j]) : 0.f;
  }
}

/** The lane's rows back, rounded to ST (none without a state or past Dv). */
template <int DK, typename ST>
__device__ __forceinline__ void store_column(ST* S, int part, int j, int Dv, const float* col) {
  constexpr int PARTS = DK / 32;
  if (S == nullptr || j >= Dv) return;
#pragma unroll
  for (int i = 0; i < 32; i++) S[(long long)(part + PARTS * i) * Dv + j] = from_float<ST>(col[i]);
}

/** A token's q and k l2-normed into the warp's qs and ks (q scaled too), and its decay and beta: rule_token's start. */
template <int DK>
__device__ __forceinline__ void token_gates(const TokenIn<DK>& in, float* qs, float* ks, float A, float bias,
                                            float qScale, float& decay, float& beta) {
  const int lane = threadIdx.x & 31;
  const float qInv = l2_inv<DK>(in.q), kInv = l2_inv<DK>(in.k);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < DK / 32; i++) {
    qs[lane + 32 * i] = __fmul_rn(__fmul_rn(in.q[i], qInv), qScale);
    ks[lane + 32 * i] = __fmul_rn(in.k[i], kInv);
  }
  __syncwarp();
  decay = expf(A * softplus(in.a + bias));
  beta = 1.f / (1.f + expf(-in.b));
}

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
