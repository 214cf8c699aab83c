// llama.cpp's block formats (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) as the CUDA backend keeps them (gguf-layout.ts): each
// block's f16 scale d moved out of Q4_0, Q8_0 and Q6_K blocks into an array of its own, so every block body left is a
// multiple of 16 bytes and is read with 16-byte loads. Each format gives two readings of its blocks:
//
// - the decoder (the dequantize kernel's): one unit at a time, UNIT consecutive values of a row (a block, or a part
//   of a K-quant block), from VECS 16-byte pieces of its block's body (vec_offset: where each lies in the body) and,
//   where HAS_D, the block's d. decode8 gives values 8i..8i+7 of the unit. The values are ggml's dequantize_row_*
//   (src/loader/gguf-quants.ts, the reference), bit for bit: each product and difference rounded to f32 where ggml
//   rounds it (mul_rn / sub_rn keep the compiler from fusing them into an fma).
// - the GEMV's dot with q8 activations (gguf_q8.cuh): a row in pieces of 32 weights, PIECES a block, each read from
//   PIECE_VECS 16-byte vectors of its block's body (piece_vec) and meeting two runs of 16 activations (run_start:
//   where each starts in the block; the X_BLOCKS q8 blocks they lie in). dot_q8 sums the piece's integer products by
//   dp4a and scales them in a fixed order of f32 operations (gguf_fma, gguf_mul_rn: no contraction left to a
//   compiler), so the host build computes what the device does.
//
// Plain C++ apart from those intrinsics and the f16 conversion, so a host compiler builds this file too
// (test/backend/gguf-decode.test.ts checks both readings against the reference).
#pragma once

#ifdef __CUDACC__
#define GGUF_HD __host__ __device__ __forceinline__
#else
#define GGUF_HD inline
#endif

GGUF_HD float gguf_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

GGUF_HD float gguf_sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

GGUF_HD float gguf_f16_to_float(unsigned short h) {
#ifdef __CUDA_ARCH__
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const unsigned sign = (unsigned)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  unsigned bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    unsigned e = 113, m = mant;
    while (!(m & 0x400)) {
      m <<= 1;
      e--;
    }
    bits = sign | (e << 23) | ((m & 0x3ff) << 13);
  }
  union {
    unsigned u;
    float f;
  } v = {bits};
  return v.f;
#endif
}

GGUF_HD float gguf_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

/** c plus the four signed bytes of a times those of b (the device's dp4a). */
GGUF_HD int gguf_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return c;
#endif
}

/** Word i (< 4) of w by selects: i varies at run time, and an indexed register array would go to local memory. */
GGUF_HD unsigned gguf_word4(const unsigned* w, int i) { return i < 2 ? (i == 0 ? w[0] : w[1]) : (i == 2 ? w[2] : w[3]); }

/** Each byte of v (each below 64) less 32, as signed bytes: the top bit set first, so no borrow crosses a byte. */
GGUF_HD int gguf_sub32_bytes(unsigned v) { return (int)(((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u); }

/** Byte b of the 32-bit words w (little-endian, as loaded). */
GGUF_HD unsigned gguf_byte(const unsigned* w, int b) { return (w[b >> 2] >> ((b & 3) * 8)) & 0xffu; }

/**
 * Q4_K and Q5_K's 6-bit scale and min of sub-block j (get_scale_min_k4) from the 12 scale bytes as three words: j may
 * vary at run time, so each word is shifted, never indexed (an indexed register array would go to local memory).
 */
GGUF_HD void gguf_scale_min_k4(int j, unsigned s0, unsigned s1, unsigned s2, unsigned& sc, unsigned& m) {
  const int shift = 8 * (j & 3);
  const unsigned b0 = (s0 >> shift) & 0xff, b1 = (s1 >> shift) & 0xff, b2 = (s2 >> shift) & 0xff;
  if (j < 4) {
    sc = b0 & 63;
    m = b1 & 63;
  } else {
    sc = (b2 & 0xf) | ((b0 >> 6) << 4);
    m = (b2 >> 4) | ((b1 >> 6) << 4);
  }
}

/**
 * Q4_K and Q5_K's piece q of a block against its two runs of q8 activations u (4 words each): lo and hi, its values
 * of sub-blocks 2j and 2j + 1 (j = q / 2) as bytes, each d sc q - dmin m. The integer sums scaled by each run's x
 * scale, then d; the minimums' part needs each q8 block's whole sum xs, so the block's first piece (q even) adds it
 * for both sub-blocks and the second adds none.
 */
GGUF_HD float gguf_k4_dot_q8(const unsigned* header, const int* lo, const int* hi, int q, const int* u, const float* xd,
                             const int* xs) {
  unsigned sc0, m0, sc1, m1;
  gguf_scale_min_k4(q & ~1, header[1], header[2], header[3], sc0, m0);
  gguf_scale_min_k4(q | 1, header[1], header[2], header[3], sc1, m1);
  int dot0 = 0, dot1 = 0;
  for (int i = 0; i < 4; i++) {
    dot0 = gguf_dp4a(lo[i], u[i], dot0);
    dot1 = gguf_dp4a(hi[i], u[4 + i], dot1);
  }
  const float d = gguf_f16_to_float((unsigned short)(header[0] & 0xffff));
  const float sd = gguf_fma(xd[1], (float)((int)sc1 * dot1), gguf_mul_rn(xd[0], (float)((int)sc0 * dot0)));
  if (q & 1) return gguf_mul_rn(d, sd);
  const float dmin = gguf_f16_to_float((unsigned short)(header[0] >> 16));
  const float sm = gguf_fma(xd[1], (float)((int)m1 * xs[1]), gguf_mul_rn(xd[0], (float)((int)m0 * xs[0])));
  return gguf_fma(d, sd, -gguf_mul_rn(dmin, sm));
}

// block_q4_0 less d: qs[16]; value l (l < 16) the low nibble of qs[l], value l + 16 its high nibble; (q - 8) d.
struct GgufQ4_0 {
  static constexpr int BLOCK = 32, BODY = 16, UNIT = 32, VECS = 1;
  static constexpr bool HAS_D = true;
  struct Ctx {
    float d;
  };
  GGUF_HD static int vec_offset(int, int) { return 0; }
  GGUF_HD static Ctx prepare(const unsigned*, float d, int) { return Ctx{d}; }
  GGUF_HD static void decode8(const unsigned* w, const Ctx& c, int i, float out[8]) {
    const int shift = i < 2 ? 0 : 4, first = (i & 1) * 8;
    for (int e = 0; e < 8; e++) out[e] = gguf_mul_rn((float)((int)((gguf_byte(w, first + e) >> shift) & 0xf) - 8), c.d);
  }
  // a piece is the block: run 0 its low nibbles, run 1 its high ones; the 8 taken off by the block's sum
  static constexpr int PIECES = 1, PIECE_VECS = 1, X_BLOCKS = 1;
  GGUF_HD static int piece_vec(int, int) { return 0; }
  GGUF_HD static int run_start(int, int r) { return 16 * r; }
  GGUF_HD static float dot_q8(const unsigned* w, float d, int, const int* u, const float* xd, const int* xs) {
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
      sumi = gguf_dp4a((int)(w[i] & 0x0f0f0f0fu), u[i], sumi);
      sumi = gguf_dp4a((int)((w[i] >> 4) & 0x0f0f0f0fu), u[4 + i], sumi);
    }
    return gguf_mul_rn(gguf_mul_rn(d, xd[0]), (float)(sumi - 8 * xs[0]));
  }
};

// block_q8_0 less d: qs[32] int8; q d.
struct GgufQ8_0 {
  static constexpr int BLOCK = 32, BODY = 32, UNIT = 32, VECS = 2;
  static constexpr bool HAS_D = true;
  struct Ctx {
    float d;
  };
  GGUF_HD static int vec_offset(int, int v) { return 16 * v; }
  GGUF_HD static Ctx prepare(const unsigned*, float d, int) { return Ctx{d}; }
  GGUF_HD static void decode8(const unsigned* w, const Ctx& c, int i, float out[8]) {
    for (int e = 0; e < 8; e++) out[e] = gguf_mul_rn((float)(signed char)gguf_byte(w, 8 * i + e), c.d);
  }
  // a piece is the block, its two 16-byte halves the runs
  static constexpr int PIECES = 1, PIECE_VECS = 2, X_BLOCKS = 1;
  GGUF_HD static int piece_vec(int, int v) { return 16 * v; }
  GGUF_HD static int run_start(int, int r) { return 16 * r; }
  GGUF_HD static float dot_q8(const unsigned* w, float d, int, const int* u, const float* xd, const int*) {
    int sumi = 0;
    for (int i = 0; i < 8; i++) sumi = gguf_dp4a((int)w[i], u[i], sumi);
    return gguf_mul_rn(gguf_mul_rn(d, xd[0]), (float)sumi);
  }
};

// block_q4_K: d, dmin (f16), scales[12], qs[128]. Unit j (of 4) is values 64j..64j+63: sub-blocks 2j (the low nibbles
// of qs[32j..32j+31]) and 2j + 1 (their high nibbles), each d1 q - m1. Pieces: the header, then the unit's 32 qs bytes.
struct GgufQ4_K {
  static constexpr int BLOCK = 256, BODY = 144, UNIT = 64, VECS = 3;
  static constexpr bool HAS_D = false;
  struct Ctx {
    float d1, m1, d2, m2;
  };
  GGUF_HD static int vec_offset(int j, int v) { return v == 0 ? 0 : 16 + 32 * j + 16 * (v - 1); }
  GGUF_HD static Ctx prepare(const unsigned* w, float, int j) {
    const float d = gguf_f16_to_float((unsigned short)(w[0] & 0xffff)), dmin = gguf_f16_to_float((unsigned short)(w[0] >> 16));
    unsigned sc1, m1, sc2, m2;
    gguf_scale_min_k4(2 * j, w[1], w[2], w[3], sc1, m1);
    gguf_scale_min_k4(2 * j + 1, w[1], w[2], w[3], sc2, m2);
    return Ctx{gguf_mul_rn(d, (float)sc1), gguf_mul_rn(dmin, (float)m1), gguf_mul_rn(d, (float)sc2), gguf_mul_rn(dmin, (float)m2)};
  }
  GGUF_HD static void decode8(const unsigned* w, const Ctx& c, int i, float out[8]) {
    const bool high = i >= 4;
    const float d = high ? c.d2 : c.d1, m = high ? c.m2 : c.m1;
    const int first = 16 + (i & 3) * 8;  // qs bytes start after the header's 16
    for (int e = 0; e < 8; e++) {
      const unsigned q = (gguf_byte(w, first + e) >> (high ? 4 : 0)) & 0xf;
      out[e] = gguf_sub_rn(gguf_mul_rn(d, (float)q), m);
    }
  }
  // piece q (of 8): 16 qs bytes at 32 (q / 2) + 16 (q % 2), low nibbles values 16 (q % 2).. of sub-block q & ~1 (run
  // 0), high nibbles the same of sub-block q | 1 (run 1); the header with them
  static constexpr int PIECES = 8, PIECE_VECS = 2, X_BLOCKS = 2;
  GGUF_HD static int piece_vec(int q, int v) { return v == 0 ? 0 : 16 + 32 * (q >> 1) + 16 * (q & 1); }
  GGUF_HD static int run_start(int q, int r) { return 64 * (q >> 1) + 32 * r + 16 * (q & 1); }
  GGUF_HD static float dot_q8(const unsigned* w, float, int q, const int* u, const float* xd, const int* xs) {
    int lo[4], hi[4];
    for (int i = 0; i < 4; i++) {
      lo[i] = (int)(w[4 + i] & 0x0f0f0f0fu);
      hi[i] = (int)((w[4 + i] >> 4) & 0x0f0f0f0fu);
    }
    return gguf_k4_dot_q8(w, lo, hi, q, u, xd, xs);
  }
};

// block_q5_K: d, dmin, scales[12], qh[32], qs[128]. As Q4_K, plus a fifth bit: bit 2j (values of sub-block 2j) or
// 2j + 1 of qh[l] for value l of the sub-block. Pieces: the header, qh, the unit's 32 qs bytes.
struct GgufQ5_K {
  static constexpr int BLOCK = 256, BODY = 176, UNIT = 64, VECS = 5;
  static constexpr bool HAS_D = false;
  struct Ctx {
    float d1, m1, d2, m2;
    int j;
  };
  GGUF_HD static int vec_offset(int j, int v) { return v < 3 ? 16 * v : 48 + 32 * j + 16 * (v - 3); }
  GGUF_HD static Ctx prepare(const unsigned* w, float, int j) {
    const GgufQ4_K::Ctx s = GgufQ4_K::prepare(w, 0.f, j);
    return Ctx{s.d1, s.m1, s.d2, s.m2, j};
  }
  GGUF_HD static void decode8(const unsigned* w, const Ctx& c, int i, float out[8]) {
    const bool high = i >= 4;
    const float d = high ? c.d2 : c.d1, m = high ? c.m2 : c.m1;
    const int l0 = (i & 3) * 8, bit = 2 * c.j + (high ? 1 : 0);
    for (int e = 0; e < 8; e++) {
      const unsigned q = ((gguf_byte(w, 48 + l0 + e) >> (high ? 4 : 0)) & 0xf) | (((gguf_byte(w, 16 + l0 + e) >> bit) & 1) << 4);
      out[e] = gguf_sub_rn(gguf_mul_rn(d, (float)q), m);
    }
  }
  // piece q as Q4_K's, with the 16 qh bytes of its values (bits q & ~1 and q | 1 above the nibbles)
  static constexpr int PIECES = 8, PIECE_VECS = 3, X_BLOCKS = 2;
  GGUF_HD static int piece_vec(int q, int v) { return v == 0 ? 0 : v == 1 ? 16 + 16 * (q & 1) : 48 + 32 * (q >> 1) + 16 * (q & 1); }
  GGUF_HD static int run_start(int q, int r) { return GgufQ4_K::run_start(q, r); }
  GGUF_HD static float dot_q8(const unsigned* w, float, int q, const int* u, const float* xd, const int* xs) {
    const int bit = q & ~1;
    int lo[4], hi[4];
    for (int i = 0; i < 4; i++) {
      lo[i] = (int)((w[8 + i] & 0x0f0f0f0fu) | (((w[4 + i] >> bit) & 0x01010101u) << 4));
      hi[i] = (int)(((w[8 + i] >> 4) & 0x0f0f0f0fu) | (((w[4 + i] >> (bit + 1)) & 0x01010101u) << 4));
    }
    return gguf_k4_dot_q8(w, lo, hi, q, u, xd, xs);
  }
};

// block_q6_K less d: ql[128], qh[64], scales[16] (int8). Unit n (of 2) is values 128n..128n+127; its value 32k + l
// (k < 4, l < 32) is ql[64n + l + 32 (k & 1)]'s low (k < 2) or high nibble, with bits 2k..2k+1 of qh[32n + l] above
// them, less 32, times d scales[8n + l / 16 + 2k]. Pieces: the unit's 64 ql bytes, its 32 qh bytes, the 16 scales.
struct GgufQ6_K {
  static constexpr int BLOCK = 256, BODY = 208, UNIT = 128, VECS = 7;
  static constexpr bool HAS_D = true;
  struct Ctx {
    float scale[8];
  };
  GGUF_HD static int vec_offset(int n, int v) { return v < 4 ? 64 * n + 16 * v : v < 6 ? 128 + 32 * n + 16 * (v - 4) : 192; }
  GGUF_HD static Ctx prepare(const unsigned* w, float d, int n) {
    Ctx c;
    const unsigned half[2] = {n ? w[26] : w[24], n ? w[27] : w[25]};  // scales[8n..8n+7]
    for (int s = 0; s < 8; s++) c.scale[s] = gguf_mul_rn(d, (float)(signed char)gguf_byte(half, s));
    return c;
  }
  GGUF_HD static void decode8(const unsigned* w, const Ctx& c, int i, float out[8]) {
    const int k = i >> 2, l0 = (i & 3) * 8;
    const float scale = c.scale[(l0 >> 4) + 2 * k];
    for (int e = 0; e < 8; e++) {
      const int l = l0 + e;
      const unsigned lo = (gguf_byte(w, l + 32 * (k & 1)) >> ((k >> 1) * 4)) & 0xf;
      const unsigned hi = (gguf_byte(w, 64 + l) >> (2 * k)) & 3;
      out[e] = gguf_mul_rn(scale, (float)((int)(lo | (hi << 4)) - 32));
    }
  }
  // piece q (of 8; n = q / 4, h = q / 2 % 2, g = q % 2): 16 ql bytes at 64 n + 32 h + 16 g, the 16 qh bytes of their
  // values, the 16 scales. Low nibbles (k = h, qh bits 2h) are values 128 n + 32 h + 16 g.. (run 0, scale 8 n + g +
  // 2 h), high nibbles (k = h + 2) the values 64 further (run 1, the scale 4 further)
  static constexpr int PIECES = 8, PIECE_VECS = 3, X_BLOCKS = 2;
  GGUF_HD static int piece_vec(int q, int v) {
    const int n = q >> 2, h = (q >> 1) & 1, g = q & 1;
    return v == 0 ? 64 * n + 32 * h + 16 * g : v == 1 ? 128 + 32 * n + 16 * g : 192;
  }
  GGUF_HD static int run_start(int q, int r) { return 128 * (q >> 2) + 32 * ((q >> 1) & 1) + 16 * (q & 1) + 64 * r; }
  GGUF_HD static float dot_q8(const unsigned* w, float d, int q, const int* u, const float* xd, const int*) {
    const int h = (q >> 1) & 1;
    int dot0 = 0, dot1 = 0;
    for (int i = 0; i < 4; i++) {
      const unsigned ql = w[i], qh = w[4 + i];
      dot0 = gguf_dp4a(gguf_sub32_bytes((ql & 0x0f0f0f0fu) | (((qh >> (2 * h)) & 0x03030303u) << 4)), u[i], dot0);
      dot1 = gguf_dp4a(gguf_sub32_bytes(((ql >> 4) & 0x0f0f0f0fu) | (((qh >> (2 * h + 4)) & 0x03030303u) << 4)), u[4 + i],
                       dot1);
    }
    const int s0 = 8 * (q >> 2) + (q & 1) + 2 * h, shift = 8 * (s0 & 3);
    const int sc0 = (signed char)((gguf_word4(w + 8, s0 >> 2) >> shift) & 0xffu);
    const int sc1 = (signed char)((gguf_word4(w + 8, (s0 + 4) >> 2) >> shift) & 0xffu);
    return gguf_mul_rn(d, gguf_fma(xd[1], (float)(sc1 * dot1), gguf_mul_rn(xd[0], (float)(sc0 * dot0))));
  }
};
