// Kernel sources as NVRTC is given them, the cubin cache, and the nvcc result cache
// that test/kernels (every kernel compiled by nvcc: `npm run test:kernels`) runs on.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileTarget, cubinCacheKey, expandSource, kernelDefines, kernelDir, kernelFiles, loadCubin } from
  '../src/backend/cuda/compile.js';
import { nvccCacheKey, nvccCached } from './kernels/nvcc-cache.js';

test('kernel sources are found from the compiled test and expand without local includes', () => {
  const files = kernelFiles();
  assert.ok(files.length >= 6, `kernel files in ${kernelDir()}: ${files.join(', ')}`);
  for (const f of files) {
    const src = expandSource(f);
    assert.doesNotMatch(src, /#include\s+"/, f);
    assert.match(src, /struct __align__\(2\) bf16_t/, `${f} carries common.cuh`);
    assert.equal(src.match(/struct __align__\(2\) bf16_t/g)!.length, 1, `${f} inlines common.cuh once`);
  }
});

test('cubin cache key depends on source, arch and NVRTC version', () => {
  const a = cubinCacheKey('src', 90, '13.0');
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.notEqual(a, cubinCacheKey('src', 80, '13.0'));
  assert.notEqual(a, cubinCacheKey('src', 90, '12.9'));
  assert.notEqual(a, cubinCacheKey('src2', 90, '13.0'));
  assert.notEqual(a, cubinCacheKey('src', 90, '13.0', ['--std=c++17']), 'the compile options are part of the key');
});

test('moe_wgmma.cu builds for sm_90a on an sm_90 device, every other file for the plain arch; the target keys the cache', () => {
  assert.equal(compileTarget('moe_wgmma.cu', 90), '90a');
  assert.equal(compileTarget('moe_wgmma.cu', 80), '80');
  assert.equal(compileTarget('moe_wgmma.cu', 100), '100');
  for (const f of kernelFiles().filter((x) => x !== 'moe_wgmma.cu')) assert.equal(compileTarget(f, 90), '90', f);
  assert.equal(cubinCacheKey('src', '90', '13.0'), cubinCacheKey('src', 90, '13.0'), 'the plain target keys as before');
  assert.notEqual(cubinCacheKey('src', '90a', '13.0'), cubinCacheKey('src', 90, '13.0'));
  const dir = mkdtempSync(join(tmpdir(), 'quire-cubin-'));
  try {
    const targets: string[] = [];
    const compiler = { version: 'test', compile: (_s: string, name: string, arch: string) => {
      targets.push(`${name} ${arch}`);
      return new Uint8Array(1);
    } };
    loadCubin('moe_wgmma.cu', 90, compiler, dir);
    loadCubin('moe.cu', 90, compiler, dir);
    assert.deepEqual(targets, ['moe_wgmma.cu 90a', 'moe.cu 90']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('loadCubin compiles once, then reads the disk cache', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-cubin-'));
  try {
    let numCompiles = 0;
    const compiler = { version: 'test', compile: (src: string) => { numCompiles++; return new TextEncoder().encode(src.slice(0, 16)); } };
    const first = loadCubin('norm.cu', 90, compiler, dir);
    const second = loadCubin('norm.cu', 90, compiler, dir);
    assert.equal(numCompiles, 1);
    assert.deepEqual(second, first);
    loadCubin('norm.cu', 80, compiler, dir);
    assert.equal(numCompiles, 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('QUIRE_KERNEL_DEFINES prepends #defines that the kernels\' own defaults give way to', () => {
  assert.equal(kernelDefines({}), '');
  assert.equal(kernelDefines({ QUIRE_KERNEL_DEFINES: 'CHAIN_S2_EARLY=7, NORM_TRIGGER_EARLY=0' }),
    '#define CHAIN_S2_EARLY 7\n#define NORM_TRIGGER_EARLY 0\n');
  assert.throws(() => kernelDefines({ QUIRE_KERNEL_DEFINES: 'CHAIN_S2_EARLY' }), /QUIRE_KERNEL_DEFINES=CHAIN_S2_EARLY: "CHAIN_S2_EARLY" is not NAME=integer/);
  // the knobs it is for are defaults a #define before them overrides
  assert.match(expandSource('gemm_chain.cu'), /#ifndef CHAIN_S2_EARLY\n#define CHAIN_S2_EARLY 6\n#endif/);
  assert.match(expandSource('norm.cu'), /#ifndef NORM_TRIGGER_EARLY\n#define NORM_TRIGGER_EARLY 1\n#endif/);
  const dir = mkdtempSync(join(tmpdir(), 'quire-cubin-'));
  const saved = process.env.QUIRE_KERNEL_DEFINES;
  try {
    const sources: string[] = [];
    const compiler = { version: 'test', compile: (src: string) => { sources.push(src); return new Uint8Array(1); } };
    delete process.env.QUIRE_KERNEL_DEFINES;
    loadCubin('norm.cu', 90, compiler, dir);
    process.env.QUIRE_KERNEL_DEFINES = 'NORM_TRIGGER_EARLY=0';
    loadCubin('norm.cu', 90, compiler, dir);  // another source, so another cache entry
    assert.equal(sources.length, 2);
    assert.ok(sources[1]!.startsWith('#define NORM_TRIGGER_EARLY 0\n'));
    assert.equal(sources[1]!.slice('#define NORM_TRIGGER_EARLY 0\n'.length), sources[0]);
  } finally {
    if (saved === undefined) delete process.env.QUIRE_KERNEL_DEFINES;
    else process.env.QUIRE_KERNEL_DEFINES = saved;
    rmSync(dir, { recursive: true, force: true });
  }
});

test('nvcc results are cached by version, arguments and source; failures are not', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-nvcc-cache-'));
  try {
    const compiled: string[] = [];
    const run = async (args: string[], source: string, _name: string, out: string): Promise<void> => {
      compiled.push(source);
      if (source.includes('error')) throw new Error('nvcc failed');
      writeFileSync(out, `ptx of ${source} ${args.join(' ')}`);
    };
    const opts = { version: '12.8', cacheDir: dir, run };
    assert.equal((await nvccCached(['-ptx'], 'a', 'a.cu', opts)).toString(), 'ptx of a -ptx');
    assert.equal((await nvccCached(['-ptx'], 'a', 'a.cu', opts)).toString(), 'ptx of a -ptx');
    assert.equal(compiled.length, 1, 'the second run reads the cache');
    await nvccCached(['-ptx'], 'b', 'a.cu', opts);
    await nvccCached(['-fatbin'], 'a', 'a.cu', opts);
    await nvccCached(['-ptx'], 'a', 'a.cu', { ...opts, version: '13.0' });
    assert.equal(compiled.length, 4, 'another source, arguments or nvcc compiles again');
    await assert.rejects(nvccCached(['-ptx'], 'error', 'e.cu', opts), /nvcc failed/);
    await assert.rejects(nvccCached(['-ptx'], 'error', 'e.cu', opts), /nvcc failed/);
    assert.equal(compiled.length, 6, 'a failure is compiled again');
    assert.equal(readdirSync(dir).length, 4, 'one entry per success, no partial files');
    assert.notEqual(nvccCacheKey('12.8', ['-ptx'], 'a'), nvccCacheKey('12.8', ['-ptx', 'a'], ''));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
