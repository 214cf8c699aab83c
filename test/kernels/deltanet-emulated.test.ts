// The gated DeltaNet rule's builds (kernels/deltanet.cu, deltanet_chunked.cu) run on the CPU
// (g++, test/kernels/emulated/cuda-shim.h standing in for CUDA: a block's threads as std::threads meeting at
// barriers), so their logic is checked without a GPU, on every CI run: deltanet_recurrent_wide gives
// deltanet_recurrent's bits, deltanet_chunked (chunks of 64 and of 32, on CUDA cores and
// on tensor cores) lands within 1e-4 of it over prompts of several chunks, a mixed step's launches split the
// sequences as the engine does, and deltanet_recurrent_mixed gives the two builds' bits in one launch
// (emulated/deltanet-harness.cpp). The GPU tests (test/gpu/deltanet.test.ts) still tie the device's own arithmetic to
// the CPU backend. Skips without g++. Apart from `npm test` (`npm run test:kernels`): ~100 s on 2 cores.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expandSource } from '../../src/backend/cuda/compile.js';
import { moduleDefines } from '../../src/backend/cuda/kernel-defines.js';

const gpp = spawnSync('g++', ['--version'], { encoding: 'utf8' });
const skip = gpp.status === 0 ? false : 'g++ not found on PATH';
const DIR = join('test', 'kernels', 'emulated');

/** The rule's kernel files, each with the helpers they share (deltanet_common.cuh) inlined once. */
const FILES = ['deltanet.cu', 'deltanet_chunked.cu'];

/**
 * The emulated program: the shim, the files' #defines (none of their per-Dk kernels instantiated: the harness calls
 * the device functions itself), the files with their headers inlined but common.cuh (the shim's), then the harness.
 */
export function emulatedDeltanetSource(): string {
  const defines = new Map<string, string>();
  for (const f of FILES) {
    for (const line of moduleDefines(f).split('\n').filter((l) => l.startsWith('#define '))) {
      defines.set(line.split(' ')[1]!.split('(')[0]!, line);
    }
  }
  defines.set('DELTANET_KEY_DIMS', '#define DELTANET_KEY_DIMS(X, s, T)');
  const seen = new Set(['common.cuh', 'mma.cuh']);
  return [readFileSync(join(DIR, 'cuda-shim.h'), 'utf8'), ...defines.values(), ...FILES.map((f) => expandSource(f,
    undefined, seen)), readFileSync(join(DIR, 'deltanet-harness.cpp'), 'utf8')].join('\n');
}

test('the DeltaNet rule builds on the CPU: wide gives deltanet_recurrent\'s bits, chunked lands within 1e-4, '
  + 'a mixed step\'s launches split its sequences', { skip, timeout: 600_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-emu-'));
  try {
    writeFileSync(join(dir, 'deltanet.cpp'), emulatedDeltanetSource());
    const built = spawnSync('g++', ['-std=c++20', '-O1', '-pthread', '-o', join(dir, 'deltanet'),
      join(dir, 'deltanet.cpp')], { encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    const ran = spawnSync(join(dir, 'deltanet'), [], { encoding: 'utf8' });
    const out = ran.stdout;
    assert.equal(ran.status, 0, out + ran.stderr);
    assert.match(out, /ok\n$/);
    assert.equal((out.match(/: 0 of \d+ bits differ/g) ?? []).length, 18, out);
    assert.equal((out.match(/worst relative error/g) ?? []).length, 36, out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
