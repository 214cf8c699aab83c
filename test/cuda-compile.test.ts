// Every kernel file compiles with nvcc for sm_80 and sm_90, as the exact text
// NVRTC is given (the #defines shared with TypeScript, then the file with its local
// headers inlined by expandSource). Skips when nvcc is absent.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { cubinCacheKey, expandSource, kernelDefines, kernelDir, kernelFiles, kernelSource, loadCubin } from '../src/backend/cuda/compile.js';

const run = promisify(execFile);
const nvccFound = spawnSync('nvcc', ['--version']).status === 0;

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

test('the chain GEMMs stream their weights with an evict_first L2 hint, which CHAIN_EVICT_FIRST=0 drops',
  { skip: nvccFound ? false : 'nvcc not found on PATH' }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quire-nvcc-'));
    try {
      const ptxOf = async (defines: string): Promise<string> => {
        const src = join(dir, `gemm_chain${defines.length}.cu`);
        writeFileSync(src, defines + kernelSource('gemm_chain.cu', {}));
        await run('nvcc', ['-arch=sm_90', '-ptx', '-o', `${src}.ptx`, src]);
        return readFileSync(`${src}.ptx`, 'utf8');
      };
      const hinted = (ptx: string) => (ptx.match(/cp\.async\.cg\.shared\.global\.L2::cache_hint/g) ?? []).length;
      const plain = (ptx: string) => (ptx.match(/cp\.async\.cg\.shared\.global \[/g) ?? []).length;
      const on = await ptxOf('');
      const off = await ptxOf('#define CHAIN_EVICT_FIRST 0\n');
      assert.match(on, /createpolicy\.fractional\.L2::evict_first/);
      assert.ok(hinted(on) > 0 && plain(on) > 0, 'weights hinted, tokens not');
      assert.equal(hinted(off), 0);
      assert.equal(plain(off), plain(on) + hinted(on), 'the same loads, unhinted');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

test('every kernel compiles with nvcc for sm_80 and sm_90', { skip: nvccFound ? false : 'nvcc not found on PATH' },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quire-nvcc-'));
    try {
      const files = kernelFiles();
      const compileOne = async (f: string): Promise<void> => {
        const src = join(dir, f);
        writeFileSync(src, kernelSource(f, {}));
        await run('nvcc', ['-gencode', 'arch=compute_80,code=sm_80', '-gencode', 'arch=compute_90,code=sm_90',
          '-fatbin', '-Werror', 'all-warnings', '-o', join(dir, `${f}.fatbin`), src]);
      };
      const queue = [...files];
      const failures: string[] = [];
      await Promise.all([0, 1].map(async () => {
        for (let f = queue.shift(); f; f = queue.shift()) {
          await compileOne(f).catch((err: { stderr?: string }) => { failures.push(`${f}: ${err.stderr ?? err}`); });
        }
      }));
      assert.deepEqual(failures, []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
