// Every kernel file compiles with nvcc for sm_80 and sm_90, as the exact text NVRTC is given (the #defines shared
// with TypeScript, then the file with its local headers inlined: kernelSource). Skips when nvcc is absent. Runs apart from `npm test` (`npm run test:kernels`,
// which .ci/run calls): compiling every kernel takes minutes on 2 cores. Results are cached by nvcc's version,
// its arguments and the source (nvcc-cache.ts), so only a changed kernel is compiled again.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileTarget, kernelFiles, kernelSource } from '../../src/backend/cuda/compile.js';
import { nvccCached, nvccVersion } from './nvcc-cache.js';

const version = nvccVersion();
const skip = version === null ? 'nvcc not found on PATH (it comes with the CUDA toolkit)' : false;

test('the chain GEMMs stream their weights with an evict_first L2 hint, which CHAIN_EVICT_FIRST=0 drops', { skip },
  async () => {
    const ptxOf = async (defines: string): Promise<string> =>
      (await nvccCached(['-arch=sm_90', '-ptx'], defines + kernelSource('gemm_chain.cu', {}), 'gemm_chain.cu',
        { version: version! })).toString('utf8');
    const hinted = (ptx: string) => (ptx.match(/cp\.async\.cg\.shared\.global\.L2::cache_hint/g) ?? []).length;
    const plain = (ptx: string) => (ptx.match(/cp\.async\.cg\.shared\.global \[/g) ?? []).length;
    const [on, off] = await Promise.all([ptxOf(''), ptxOf('#define CHAIN_EVICT_FIRST 0\n')]);
    assert.match(on, /createpolicy\.fractional\.L2::evict_first/);
    assert.ok(hinted(on) > 0 && plain(on) > 0, 'weights hinted, tokens not');
    assert.equal(hinted(off), 0);
    assert.equal(plain(off), plain(on) + hinted(on), 'the same loads, unhinted');
  });

test('the DeltaNet decode kernels trigger their dependent before they wait under DELTANET_TRIGGER_EARLY, and read '
  + 'their state and window before it under DELTANET_READ_EARLY', { skip }, async () => {
  const ptxOf = async (defines: string): Promise<string> =>
    (await nvccCached(['-arch=sm_90', '-ptx'], defines + kernelSource('deltanet.cu', {}), 'deltanet.cu',
      { version: version! })).toString('utf8');
  /** The PTX of entry `name`: its text up to the next entry. */
  const entry = (ptx: string, name: string): string => {
    const at = ptx.indexOf(`.entry ${name}(`);
    assert.ok(at >= 0, `no entry ${name}`);
    const next = ptx.indexOf('.entry ', at + 1);
    return ptx.slice(at, next < 0 ? undefined : next);
  };
  const before = (text: string, what: RegExp) => text.slice(0, text.indexOf('griddepcontrol.wait')).match(what)?.length ?? 0;
  const kernels = ['conv1d_silu_bf16', 'deltanet_recurrent_bf16_128', 'rms_norm_gated_bf16'];
  const [base, early, read] = await Promise.all([ptxOf(''), ptxOf('#define DELTANET_TRIGGER_EARLY 1\n'),
    ptxOf('#define DELTANET_READ_EARLY 1\n')]);
  for (const k of kernels) {
    const order = (ptx: string) => ['griddepcontrol.wait', 'griddepcontrol.launch_dependents']
      .sort((a, b) => entry(ptx, k).indexOf(a) - entry(ptx, k).indexOf(b))[0];
    assert.equal(order(base), 'griddepcontrol.wait', `${k}: waits first by default`);
    assert.equal(order(early), 'griddepcontrol.launch_dependents', `${k}: triggers first under the switch`);
  }
  // the state's 32 floats a lane (and the gate weights), and the conv's taps and window, before the wait
  const loads = /ld\.global(\.nc)?\.(f32|u16|b16)/g;
  assert.equal(before(entry(base, 'deltanet_recurrent_bf16_128'), loads), 0);
  assert.ok(before(entry(read, 'deltanet_recurrent_bf16_128'), loads) >= 32);
  assert.equal(before(entry(base, 'conv1d_silu_bf16'), loads), 0);
  assert.ok(before(entry(read, 'conv1d_silu_bf16'), loads) > 0);
});

test('the DeltaNet decode kernels\' _sbf16 builds keep bf16 states: 32 2-byte stores a lane where the f32 builds '
  + 'store 32 floats', { skip }, async () => {
  const ptx = (await nvccCached(['-arch=sm_90', '-ptx'], kernelSource('deltanet.cu', {}), 'deltanet.cu',
    { version: version! })).toString('utf8');
  const entry = (name: string): string => {
    const at = ptx.indexOf(`.entry ${name}(`);
    assert.ok(at >= 0, `no entry ${name}`);
    const next = ptx.indexOf('.entry ', at + 1);
    return ptx.slice(at, next < 0 ? undefined : next);
  };
  const count = (text: string, what: RegExp) => text.match(what)?.length ?? 0;
  for (const k of ['deltanet_recurrent', 'deltanet_recurrent_norm', 'deltanet_decode']) {
    const [f32, bf16] = [entry(`${k}_bf16_128`), entry(`${k}_bf16_128_sbf16`)];
    // (deltanet_decode also stores its conv windows, f32 in both)
    const [floats, halves] = [/st\.global\.f32/g, /st\.global\.(u16|b16)/g];
    assert.equal(count(f32, floats) - count(bf16, floats), 32, `${k}: 32 f32 state stores fewer`);
    assert.equal(count(bf16, halves) - count(f32, halves), 32, `${k}: 32 bf16 state stores more`);
  }
});

test('every kernel compiles with nvcc for sm_80 and sm_90', { skip }, async () => {
  const args = ['-gencode', 'arch=compute_80,code=sm_80', '-gencode', 'arch=compute_90,code=sm_90',
    '-fatbin', '-Werror', 'all-warnings'];
  const queue = [...kernelFiles()];
  const failures: string[] = [];
  await Promise.all([0, 1].map(async () => {
    for (let f = queue.shift(); f; f = queue.shift()) {
      await nvccCached(args, kernelSource(f, {}), f, { version: version! })
        .catch((err: { stderr?: string }) => { failures.push(`${f}: ${err.stderr ?? err}`); });
    }
  }));
  assert.deepEqual(failures, []);
});

test('the files built for sm_90a on Hopper compile for it, with wgmma in their code', { skip }, async () => {
  const files = kernelFiles().filter((f) => compileTarget(f, 90) === '90a');
  assert.ok(files.includes('moe_wgmma.cu'), files.join(', '));
  for (const f of files) {
    const ptx = (await nvccCached(['-arch=sm_90a', '-ptx', '-Werror', 'all-warnings'], kernelSource(f, {}), f,
      { version: version! })).toString('utf8');
    assert.match(ptx, /wgmma\.mma_async/, f);
  }
});
