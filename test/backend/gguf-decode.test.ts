// kernels/gguf_decode.cuh and gguf_q8.cuh, the CUDA backend's readings of GGUF blocks and its q8 activations, built by
// the host's C++ compiler (plain C++ outside a device) and run on random blocks in the device layout
// (gguf-layout.ts):
// - the decoder, unit by unit as kernels/gguf.cu's dequantize kernel loads them: every value bit for bit what the
//   reference dequantize() (src/loader/gguf-quants.ts) gives for the same GGUF blocks;
// - the q8 quantization of activations: bit for bit the TypeScript model of its rules (quantizeQ8), which the GPU
//   test's reference uses;
// - the GEMV's arithmetic, lane by lane as kernels/gguf.cu's gguf_gemv walks a row (pieces l, l + 32, ... of lane l,
//   each its dot_q8, then warp_sum's butterfly): within f32 rounding of the double sum of the dequantized weights
//   times the q8 activations (q8MatmulReference), for K with every lane busy, some lanes idle, and lanes unequal.
// The GPU tests (test/gpu/gguf-linear.test.ts) then check the kernels around them.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { kernelDir } from '../../src/backend/cuda/compile.js';
import { GGUF_DEVICE_FORMATS, ggufDeviceLayout } from '../../src/backend/cuda/gguf-layout.js';
import { dequantize, GGML_TYPES } from '../../src/loader/gguf-quants.js';
import type { GgufBlockType } from '../../src/loader/types.js';
import { q8MatmulReference, quantizeQ8, randomGgufBlocks } from './gguf-helpers.js';
import { randomArray } from './helpers.js';
import { bf16ToF32, f32ToBf16 } from '../../src/loader/dtype.js';

function compiler(): string | null {
  for (const cxx of ['g++', 'clang++', 'c++']) {
    try {
      execFileSync(cxx, ['--version'], { stdio: 'ignore' });
      return cxx;
    } catch {
      // try the next
    }
  }
  return null;
}
const cxx = compiler();

// the unit loop of kernels/gguf.cu's gguf_load_unit and gguf_dequant; gguf_q8.cuh's rules a block at a time; the
// lanes of gguf_gemv: all on the host
const HARNESS = `
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "gguf_q8.cuh"

template <class F>
void run(const unsigned char* body, const unsigned short* scales, float* out, int rows, int K) {
  const int blocksPerRow = K / F::BLOCK, unitsPerBlock = F::BLOCK / F::UNIT;
  for (int row = 0; row < rows; row++) {
    for (int u = 0; u < K / F::UNIT; u++) {
      const int b = u / unitsPerBlock, j = u % unitsPerBlock;
      const unsigned char* block = body + ((long long)row * blocksPerRow + b) * F::BODY;
      unsigned w[F::VECS * 4];
      for (int v = 0; v < F::VECS; v++) std::memcpy(w + 4 * v, block + F::vec_offset(j, v), 16);
      const float d = F::HAS_D ? gguf_f16_to_float(scales[(long long)row * blocksPerRow + b]) : 0.f;
      const typename F::Ctx c = F::prepare(w, d, j);
      for (int i = 0; i < F::UNIT / 8; i++) F::decode8(w, c, i, out + (long long)row * K + u * F::UNIT + 8 * i);
    }
  }
}

// y [T][rows]: each row's pieces lane by lane, as gguf_gemv's loop and warp_sum
template <class F>
void gemv(const unsigned char* body, const unsigned short* scales, const signed char* xq, const float* xd, const int* xs,
          float* y, int rows, int K, int T) {
  const int blocksPerRow = K / F::BLOCK, pieces = K / 32;
  for (int row = 0; row < rows; row++) {
    for (int t = 0; t < T; t++) {
      float acc[32];
      for (int lane = 0; lane < 32; lane++) {
        acc[lane] = 0.f;
        for (int p = lane; p < pieces; p += 32) {
          const int b = p / F::PIECES, q = p % F::PIECES;
          unsigned w[F::PIECE_VECS * 4];
          for (int v = 0; v < F::PIECE_VECS; v++) {
            std::memcpy(w + 4 * v, body + ((long long)row * blocksPerRow + b) * F::BODY + F::piece_vec(q, v), 16);
          }
          const float d = F::HAS_D ? gguf_f16_to_float(scales[(long long)row * blocksPerRow + b]) : 0.f;
          const int s0 = b * F::BLOCK + F::run_start(q, 0), s1 = b * F::BLOCK + F::run_start(q, 1);
          int u[8];
          std::memcpy(u, xq + (long long)t * K + s0, 16);
          std::memcpy(u + 4, xq + (long long)t * K + s1, 16);
          const int e0 = t * pieces + s0 / 32, e1 = t * pieces + (F::X_BLOCKS == 2 ? s1 : s0) / 32;
          const float d2[2] = {xd[e0], xd[e1]};
          const int s2[2] = {xs[e0], xs[e1]};
          acc[lane] += F::dot_q8(w, d, q, u, d2, s2);
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        float next[32];
        for (int lane = 0; lane < 32; lane++) next[lane] = acc[lane] + acc[lane ^ o];
        std::memcpy(acc, next, sizeof acc);
      }
      y[(long long)t * rows + row] = acc[0];
    }
  }
}

static std::vector<unsigned char> slurp(const char* file) {
  FILE* f = std::fopen(file, "rb");
  std::vector<unsigned char> v;
  int c;
  while ((c = std::fgetc(f)) != EOF) v.push_back((unsigned char)c);
  std::fclose(f);
  return v;
}

static void spill(const char* file, const void* data, size_t bytes) {
  FILE* f = std::fopen(file, "wb");
  std::fwrite(data, 1, bytes, f);
  std::fclose(f);
}

template <class T>
static std::vector<T> as(const std::vector<unsigned char>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T) + 1);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// decode <fmt> <rows> <K> <body> <scales> <out>
// q8 <x f32> <out q> <out d> <out s>
// gemv <fmt> <rows> <K> <T> <body> <scales> <q> <d> <s> <out>
int main(int argc, char** argv) {
  const char* mode = argv[1];
  if (!std::strcmp(mode, "q8")) {
    const std::vector<float> x = as<float>(slurp(argv[2]));
    const size_t n = (x.size() - 1) / 32 * 32;
    std::vector<signed char> q(n);
    std::vector<float> d(n / 32);
    std::vector<int> s(n / 32);
    for (size_t b = 0; b < n / 32; b++) {
      float amax = 0.f;
      for (int i = 0; i < 32; i++) amax = amax > __builtin_fabsf(x[32 * b + i]) ? amax : __builtin_fabsf(x[32 * b + i]);
      d[b] = gguf_q8_scale(amax);
      s[b] = 0;
      for (int i = 0; i < 32; i++) {
        q[32 * b + i] = (signed char)gguf_q8_value(x[32 * b + i], d[b]);
        s[b] += q[32 * b + i];
      }
    }
    spill(argv[3], q.data(), n);
    spill(argv[4], d.data(), 4 * d.size());
    spill(argv[5], s.data(), 4 * s.size());
    return 0;
  }
  const char* fmt = argv[2];
  const int rows = std::atoi(argv[3]), K = std::atoi(argv[4]);
  const bool dot = !std::strcmp(mode, "gemv");
  const int T = dot ? std::atoi(argv[5]) : 0;
  const int at = dot ? 6 : 5;
  std::vector<unsigned char> body = slurp(argv[at]);
  const std::vector<unsigned short> d = as<unsigned short>(slurp(argv[at + 1]));
  if (dot) {
    const std::vector<unsigned char> q = slurp(argv[at + 2]);
    const std::vector<float> xd = as<float>(slurp(argv[at + 3]));
    const std::vector<int> xs = as<int>(slurp(argv[at + 4]));
    const signed char* xq = reinterpret_cast<const signed char*>(q.data());
    std::vector<float> y((size_t)T * rows);
    if (!std::strcmp(fmt, "q4_0")) gemv<GgufQ4_0>(body.data(), d.data(), xq, xd.data(), xs.data(), y.data(), rows, K, T);
    else if (!std::strcmp(fmt, "q8_0")) gemv<GgufQ8_0>(body.data(), d.data(), xq, xd.data(), xs.data(), y.data(), rows, K, T);
    else if (!std::strcmp(fmt, "q4_k")) gemv<GgufQ4_K>(body.data(), d.data(), xq, xd.data(), xs.data(), y.data(), rows, K, T);
    else if (!std::strcmp(fmt, "q5_k")) gemv<GgufQ5_K>(body.data(), d.data(), xq, xd.data(), xs.data(), y.data(), rows, K, T);
    else if (!std::strcmp(fmt, "q6_k")) gemv<GgufQ6_K>(body.data(), d.data(), xq, xd.data(), xs.data(), y.data(), rows, K, T);
    else return 2;
    spill(argv[at + 5], y.data(), 4 * y.size());
    return 0;
  }
  std::vector<float> out((size_t)rows * K);
  if (!std::strcmp(fmt, "q4_0")) run<GgufQ4_0>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q8_0")) run<GgufQ8_0>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q4_k")) run<GgufQ4_K>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q5_k")) run<GgufQ5_K>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q6_k")) run<GgufQ6_K>(body.data(), d.data(), out.data(), rows, K);
  else return 2;
  spill(argv[at + 2], out.data(), 4 * out.size());
  return 0;
}
`;

/** The harness built in `dir`. */
function build(dir: string): string {
  writeFileSync(join(dir, 'harness.cpp'), HARNESS);
  const exe = join(dir, 'harness');
  // -ffp-contract=off: as the device build's __fmul_rn / __fsub_rn, no product fused into a sum
  execFileSync(cxx!, ['-std=c++17', '-O1', '-ffp-contract=off', '-I', kernelDir(), join(dir, 'harness.cpp'), '-o', exe]);
  return exe;
}

const skip = cxx === null ? 'no C++ compiler (g++, clang++) on PATH' : false;
const dir = mkdtempSync(join(tmpdir(), 'quire-gguf-decode-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let exe: string | null = null;
const harness = (): string => (exe ??= build(dir));
/** A file's bytes in an ArrayBuffer of their own (a small file's Buffer is a view of a shared pool). */
function bytesOf(file: string): ArrayBuffer {
  const b = readFileSync(file);
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
}
const f32s = (file: string): Float32Array => new Float32Array(bytesOf(file));

test('gguf_decode.cuh decodes the device layout of every format to exactly dequantize()\'s values', { skip }, () => {
  for (const type of Object.keys(GGUF_DEVICE_FORMATS) as GgufBlockType[]) {
    const [rows, K] = [3, 2 * GGML_TYPES[type].blockElems * (type.endsWith('_K') ? 1 : 8)];
    const blocks = randomGgufBlocks(type, rows, K, 7 + K);
    const { body, scales } = ggufDeviceLayout(type, blocks, rows, K);
    writeFileSync(join(dir, 'body'), body);
    writeFileSync(join(dir, 'scales'), scales ?? new Uint8Array(0));
    execFileSync(harness(), ['decode', GGUF_DEVICE_FORMATS[type].kernelName, String(rows), String(K), join(dir, 'body'),
      join(dir, 'scales'), join(dir, 'out')]);
    const got = new Uint32Array(bytesOf(join(dir, 'out')));
    const want = new Uint32Array(dequantize(type, blocks, rows * K).buffer);
    assert.equal(got.length, want.length, type);
    const bad = want.findIndex((w, i) => got[i] !== w);
    assert.equal(bad, -1, `${type} value ${bad}: ${new Float32Array(got.buffer)[bad]} != ${new Float32Array(want.buffer)[bad]}`);
  }
});

/** bf16-exact activations [T, K] with a block of zeros, a block of one value, and ties (x / d = n + 0.5). */
function activations(T: number, K: number, seed: number): Float32Array {
  const x = bf16ToF32(f32ToBf16(randomArray(T * K, seed, -3, 3)));
  x.fill(0, 32, 64);
  x.fill(-1.5, 64, 96);
  // amax 127 * 2^-4: d = 2^-4 exactly, so 2.5 * 2^-4 and 3.5 * 2^-4 are ties, one rounding down and one up
  x.set([127 / 16, 2.5 / 16, 3.5 / 16, -2.5 / 16, -0.5 / 16], 96);
  return x;
}

test('gguf_q8.cuh quantizes activations bit for bit as quantizeQ8 models it (the GPU test\'s reference)', { skip }, () => {
  const K = 256;
  const x = activations(3, K, 11);
  writeFileSync(join(dir, 'x'), x);
  execFileSync(harness(), ['q8', join(dir, 'x'), join(dir, 'q'), join(dir, 'd'), join(dir, 's')]);
  const want = quantizeQ8(x, K);
  assert.deepEqual(new Int8Array(bytesOf(join(dir, 'q'))), want.q);
  assert.deepEqual(new Uint32Array(f32s(join(dir, 'd')).buffer), new Uint32Array(want.d.buffer));
  assert.deepEqual(new Int32Array(bytesOf(join(dir, 's'))), want.s);
  assert.deepEqual([...want.q.subarray(96, 101)], [127, 2, 4, -2, 0], 'ties to even');
  assert.equal(want.d[1], 0, 'a block of zeros');
});

test('gguf_gemv\'s lanes, on the host: every format within f32 rounding of the dequantized weights times the q8 ' +
  'activations', { skip }, () => {
  for (const type of Object.keys(GGUF_DEVICE_FORMATS) as GgufBlockType[]) {
    // K = 1024: a piece a lane; 256 and 512: lanes idle; 1280: lanes with two pieces and with one
    for (const K of [256, 512, 1024, 1280]) {
      const [rows, T] = [5, 3];
      const blocks = randomGgufBlocks(type, rows, K, 3 + K);
      const { body, scales } = ggufDeviceLayout(type, blocks, rows, K);
      const x = quantizeQ8(activations(T, K, K), K);
      writeFileSync(join(dir, 'body'), body);
      writeFileSync(join(dir, 'scales'), scales ?? new Uint8Array(0));
      writeFileSync(join(dir, 'q'), x.q);
      writeFileSync(join(dir, 'd'), x.d);
      writeFileSync(join(dir, 's'), x.s);
      execFileSync(harness(), ['gemv', GGUF_DEVICE_FORMATS[type].kernelName, String(rows), String(K), String(T),
        join(dir, 'body'), join(dir, 'scales'), join(dir, 'q'), join(dir, 'd'), join(dir, 's'), join(dir, 'out')]);
      const got = f32s(join(dir, 'out'));
      const { y, magnitude } = q8MatmulReference(dequantize(type, blocks, rows * K), x, T, rows, K);
      // f32 rounding: a few ulps of the sum of magnitudes (2e-8 seen); a wrong piece or scale is far off
      for (let i = 0; i < y.length; i++) {
        assert.ok(Math.abs(got[i]! - y[i]!) <= 1e-6 * magnitude[i]!,
          `${type} K ${K} output ${i}: ${got[i]} != ${y[i]} (sum of magnitudes ${magnitude[i]})`);
      }
    }
  }
});
