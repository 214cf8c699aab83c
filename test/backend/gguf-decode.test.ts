// kernels/gguf_decode.cuh, the CUDA backend's one decoder a GGUF block format, built by the host's C++ compiler (it is
// plain C++ outside a device) and run on random blocks in the device layout (gguf-layout.ts), unit by unit as
// kernels/gguf.cu loads them: every value bit for bit what the reference dequantize() (src/loader/gguf-quants.ts)
// gives for the same GGUF blocks. The GPU tests (test/gpu/gguf-linear.test.ts) then check the kernels around it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { kernelDir } from '../../src/backend/cuda/compile.js';
import { GGUF_DEVICE_FORMATS, ggufDeviceLayout } from '../../src/backend/cuda/gguf-layout.js';
import { dequantize, GGML_TYPES } from '../../src/loader/gguf-quants.js';
import type { GgufBlockType } from '../../src/loader/types.js';
import { randomGgufBlocks } from './gguf-helpers.js';

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

// the unit loop of kernels/gguf.cu's gguf_load_unit and gguf_dequant, on the host
const HARNESS = `
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "gguf_decode.cuh"

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

static std::vector<unsigned char> slurp(const char* file) {
  FILE* f = std::fopen(file, "rb");
  std::vector<unsigned char> v;
  int c;
  while ((c = std::fgetc(f)) != EOF) v.push_back((unsigned char)c);
  std::fclose(f);
  return v;
}

int main(int argc, char** argv) {
  const char* fmt = argv[1];
  const int rows = std::atoi(argv[2]), K = std::atoi(argv[3]);
  std::vector<unsigned char> body = slurp(argv[4]), scales = slurp(argv[5]);
  std::vector<unsigned short> d(scales.size() / 2 + 1);
  std::memcpy(d.data(), scales.data(), scales.size());
  std::vector<float> out((size_t)rows * K);
  if (!std::strcmp(fmt, "q4_0")) run<GgufQ4_0>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q8_0")) run<GgufQ8_0>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q4_k")) run<GgufQ4_K>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q5_k")) run<GgufQ5_K>(body.data(), d.data(), out.data(), rows, K);
  else if (!std::strcmp(fmt, "q6_k")) run<GgufQ6_K>(body.data(), d.data(), out.data(), rows, K);
  else return 2;
  FILE* f = std::fopen(argv[6], "wb");
  std::fwrite(out.data(), sizeof(float), out.size(), f);
  std::fclose(f);
  return 0;
}
`;

test('gguf_decode.cuh decodes the device layout of every format to exactly dequantize()\'s values',
  { skip: cxx === null ? 'no C++ compiler (g++, clang++) on PATH' : false }, () => {
    const dir = mkdtempSync(join(tmpdir(), 'quire-gguf-decode-'));
    try {
      writeFileSync(join(dir, 'harness.cpp'), HARNESS);
      const exe = join(dir, 'harness');
      // -ffp-contract=off: as the device build's __fmul_rn / __fsub_rn, no product fused into a sum
      execFileSync(cxx!, ['-std=c++17', '-O1', '-ffp-contract=off', '-I', kernelDir(), join(dir, 'harness.cpp'), '-o', exe]);
      for (const type of Object.keys(GGUF_DEVICE_FORMATS) as GgufBlockType[]) {
        const [rows, K] = [3, 2 * GGML_TYPES[type].blockElems * (type.endsWith('_K') ? 1 : 8)];
        const blocks = randomGgufBlocks(type, rows, K, 7 + K);
        const { body, scales } = ggufDeviceLayout(type, blocks, rows, K);
        writeFileSync(join(dir, 'body'), body);
        writeFileSync(join(dir, 'scales'), scales ?? new Uint8Array(0));
        execFileSync(exe, [GGUF_DEVICE_FORMATS[type].kernelName, String(rows), String(K), join(dir, 'body'),
          join(dir, 'scales'), join(dir, 'out')]);
        const got = new Uint32Array(readFileSync(join(dir, 'out')).buffer.slice(0));
        const want = new Uint32Array(dequantize(type, blocks, rows * K).buffer);
        assert.equal(got.length, want.length, type);
        const bad = want.findIndex((w, i) => got[i] !== w);
        assert.equal(bad, -1, `${type} value ${bad}: ${new Float32Array(got.buffer)[bad]} != ${new Float32Array(want.buffer)[bad]}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
