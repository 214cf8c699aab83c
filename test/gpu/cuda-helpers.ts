// Shared by the GPU tests: the skip reason on machines without CUDA, inputs
// both backends see identically (random, bf16-representable), and comparison.

import assert from 'node:assert/strict';
import { bf16ToF32, f32ToBf16 } from '../../src/loader/dtype.js';
import { cudaAvailable } from '../../src/backend/cuda/probe.js';
import { CpuBackend, type CpuBackendOptions } from '../../src/backend/cpu/cpu-backend.js';
import { CudaBackend, CudaTensor, type CudaBackendOptions } from '../../src/backend/cuda/cuda-backend.js';
import type { Backend, Tensor } from '../../src/backend/backend.js';
import type { ModelConfig } from '../../src/loader/types.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import type { LoadOptions } from '../../src/model/load-options.js';
import { batchOf, hostF32, randomArray } from '../backend/helpers.js';

const probe = cudaAvailable();
/** false when a CUDA device is usable, otherwise the one-line reason to skip. */
export const noCuda: string | false = probe.ok ? false : `no CUDA device: ${probe.reason}`;

/** bf16 relative precision is 2^-8; outputs go through a few roundings. */
export const BF16_RTOL = 1.6e-2;

/** Random values in [lo, hi) rounded to bf16, so the f32 CPU backend sees exactly what the GPU sees. */
export function randomBf16(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  return bf16ToF32(f32ToBf16(randomArray(n, seed, lo, hi)));
}

export function uploadBoth(cpu: Backend, cuda: Backend, name: string, shape: number[], values: Float32Array):
  [Tensor, Tensor] {
  return [cpu.upload(hostF32(name, shape, values)), cuda.upload(hostF32(name, shape, values))];
}

export function newCpu(opts: Partial<CpuBackendOptions> = {}): CpuBackend {
  return new CpuBackend({ kvCacheBytes: 64 << 20, numThreads: 1, ...opts });
}

export function newCuda(opts: CudaBackendOptions = {}): CudaBackend {
  return new CudaBackend({ initialWorkspaceBytes: 16 << 20, ...opts });
}

/**
 * Every element finite (the output was poisoned with NaN first, so NaN means
 * unwritten) and within rtol of the reference, with an absolute floor of
 * rtol * rms(reference) for elements near zero.
 */
export function assertBf16Close(actual: Float32Array, expected: Float32Array, what: string, rtol = BF16_RTOL): void {
  if (actual.length !== expected.length) throw new Error(`${what}: length ${actual.length} != ${expected.length}`);
  let sumSq = 0;
  for (const e of expected) sumSq += e * e;
  const atol = rtol * Math.sqrt(sumSq / Math.max(1, expected.length));
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    if (!Number.isFinite(a)) throw new Error(`${what}[${i}] = ${a}: never written (or overflow)`);
    if (!(Math.abs(a - e) <= atol + rtol * Math.abs(e))) throw new Error(`${what}[${i}]: ${a} != ${e} (rtol ${rtol})`);
  }
}

/** A one-token step begun on `c` with its workspace poisoned (NaN), so that an output never written shows. */
export function beginPoisonedStep(c: CudaBackend): void {
  c.beginStep(batchOf([{ ids: [1], start: 0, pages: [0] }], 16));
  c.fillWorkspace(0xff);
}

/** Rows start..start+rows-1 of a bf16 [R, K] tensor, as a tensor of their own (no copy). */
export function rowsOf(x: CudaTensor, start: number, rows: number): CudaTensor {
  return new CudaTensor([rows, x.shape[1]!], x.ptr + BigInt(start * x.shape[1]! * 2));
}

/** A CUDA tensor's values as bit patterns, every one written (the workspace was poisoned with NaN). */
export function bitsOf(c: CudaBackend, t: Tensor): Uint32Array {
  const out = c.toHost(t);
  const unwritten = out.findIndex((v) => !Number.isFinite(v));
  if (unwritten !== -1) throw new Error(`output ${unwritten} never written`);
  return new Uint32Array(out.buffer);
}

/** The same bits everywhere; the failure counts the outputs that differ. */
export function assertSameBits(actual: Uint32Array, expected: Uint32Array, what: string): void {
  if (actual.length !== expected.length) throw new Error(`${what}: length ${actual.length} != ${expected.length}`);
  let count = 0;
  for (let i = 0; i < actual.length; i++) if (actual[i] !== expected[i]) count++;
  if (count > 0) throw new Error(`${what}: ${count} of ${actual.length} outputs differ`);
}

/**
 * A random model of `config` on `backend`: two prompts (37 and 70 tokens, scattered pages), then 3 decode steps; the
 * logits of each step. The caller disposes of the backend.
 */
export function prefillAndDecode(config: ModelConfig, backend: Backend, seed: number, load: LoadOptions = {}):
  { out: Float32Array[]; kvBytesPerToken: number } {
  const model = Model.load(config, randomWeightSource(config, { seed }), backend, load);
  backend.allocateKvCache(model.kvCacheSpec(16, 16));
  const pages = [[3, 7, 1], [2, 9, 4, 12, 5]];
  const prompts = [Array.from({ length: 37 }, (_, i) => (i * 17 + 3) % 500),
    Array.from({ length: 70 }, (_, i) => (i * 29 + 11) % 500)];
  const out = [model.forward(batchOf(prompts.map((ids, s) => ({ ids, start: 0, pages: pages[s]! })), 16, [36, 106]))];
  for (let step = 0; step < 3; step++) {
    out.push(model.forward(batchOf([37, 70].map((len, s) => ({ ids: [(step * 13 + s) % 500], start: len + step,
      pages: pages[s]! })), 16, [0, 1])));
  }
  return { out, kvBytesPerToken: model.kvBytesPerToken() };
}

/** `bytes` of device memory at `p`, after the stream's work. */
export function readDevice(c: CudaBackend, p: bigint, bytes: number): Uint8Array {
  const host = c.device.hostAlloc(bytes);
  try {
    c.device.copyToHostAsync(host, p, bytes);
    c.device.synchronize();
    return new Uint8Array(host.view.slice(0, bytes));
  } finally {
    c.device.hostFree(host);
  }
}

export { rerunWith } from '../rerun-with.js';
