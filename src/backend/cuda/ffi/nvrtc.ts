// Typed table of NVRTC (libnvrtc.so.13 / .12): compiles CUDA C++ straight to a
// CUBIN for one architecture.

import koffi from 'koffi';
import { loadLibrary } from './discover.js';
import type { Handle } from './driver.js';

type Out<T> = [T];

export interface NvrtcApi {
  nvrtcVersion(major: Out<number>, minor: Out<number>): number;
  nvrtcGetErrorString(status: number): string;
  nvrtcCreateProgram(prog: Out<Handle | null>, src: string, name: string, numHeaders: number,
    headers: null, includeNames: null): number;
  nvrtcCompileProgram(prog: Handle, numOptions: number, options: string[]): number;
  nvrtcGetProgramLogSize(prog: Handle, size: Out<number>): number;
  nvrtcGetProgramLog(prog: Handle, log: Uint8Array): number;
  nvrtcGetCUBINSize(prog: Handle, size: Out<number>): number;
  nvrtcGetCUBIN(prog: Handle, cubin: Uint8Array): number;
  nvrtcDestroyProgram(prog: Out<Handle | null>): number;
}

const PROTOTYPES = [
  'int nvrtcVersion(_Out_ int *major, _Out_ int *minor)',
  'const char *nvrtcGetErrorString(int status)',
  'int nvrtcCreateProgram(_Out_ void **prog, const char *src, const char *name, int numHeaders, ' +
    'const char **headers, const char **includeNames)',
  'int nvrtcCompileProgram(void *prog, int numOptions, const char **options)',
  'int nvrtcGetProgramLogSize(void *prog, _Out_ size_t *size)',
  'int nvrtcGetProgramLog(void *prog, _Out_ uint8_t *log)',
  'int nvrtcGetCUBINSize(void *prog, _Out_ size_t *size)',
  'int nvrtcGetCUBIN(void *prog, _Out_ uint8_t *cubin)',
  'int nvrtcDestroyProgram(_Inout_ void **prog)',
];

let nvrtc: NvrtcApi | null = null;

export function nvrtcApi(): NvrtcApi {
  if (nvrtc) return nvrtc;
  const lib = loadLibrary('nvrtc', (path) => koffi.load(path));
  const table: Record<string, unknown> = {};
  for (const proto of PROTOTYPES) table[/(\w+)\(/.exec(proto)![1]!] = lib.func(proto);
  nvrtc = table as unknown as NvrtcApi;
  return nvrtc;
}

export class NvrtcError extends Error {
  constructor(readonly call: string, readonly status: number, message: string, readonly log = '') {
    super(`${call} failed: ${message} (${status})${log ? `\n${log}` : ''}`);
    this.name = 'NvrtcError';
  }
}

export function checkNvrtc(status: number, call: string, log = ''): void {
  if (status !== 0) throw new NvrtcError(call, status, nvrtcApi().nvrtcGetErrorString(status), log);
}

export function nvrtcVersion(): string {
  const major: Out<number> = [0];
  const minor: Out<number> = [0];
  checkNvrtc(nvrtcApi().nvrtcVersion(major, minor), 'nvrtcVersion');
  return `${major[0]}.${minor[0]}`;
}

/**
 * What every compile passes besides the architecture (part of the cubin cache's key). --device-as-default-execution-
 * space: a generic lambda's call operator (a template) carries no annotation, and NVRTC's JIT mode would take it for
 * a host function (gemm_rows.cuh hands one to each tile's store); every function the kernels name is annotated, so
 * nothing else changes.
 */
export const NVRTC_OPTIONS: readonly string[] = ['--std=c++17', '--device-as-default-execution-space'];

/** Compiles one translation unit to a CUBIN for sm_<arch> (e.g. 90, or "90a": compile.ts compileTarget). */
export function compileToCubin(source: string, name: string, arch: number | string, extraOptions: string[] = []): Uint8Array {
  const api = nvrtcApi();
  const prog: Out<Handle | null> = [null];
  checkNvrtc(api.nvrtcCreateProgram(prog, source, name, 0, null, null), 'nvrtcCreateProgram');
  const handle = prog[0]!;
  try {
    const options = [`--gpu-architecture=sm_${arch}`, ...NVRTC_OPTIONS, ...extraOptions];
    const status = api.nvrtcCompileProgram(handle, options.length, options);
    if (status !== 0) checkNvrtc(status, `nvrtcCompileProgram(${name})`, programLog(handle));
    const size: Out<number> = [0];
    checkNvrtc(api.nvrtcGetCUBINSize(handle, size), 'nvrtcGetCUBINSize');
    const cubin = new Uint8Array(size[0]);
    checkNvrtc(api.nvrtcGetCUBIN(handle, cubin), 'nvrtcGetCUBIN');
    return cubin;
  } finally {
    api.nvrtcDestroyProgram([handle]);
  }
}

function programLog(handle: Handle): string {
  const api = nvrtcApi();
  const size: Out<number> = [0];
  if (api.nvrtcGetProgramLogSize(handle, size) !== 0 || size[0] <= 1) return '';
  const log = new Uint8Array(size[0]);
  api.nvrtcGetProgramLog(handle, log);
  return Buffer.from(log.subarray(0, size[0] - 1)).toString('utf8');
}
