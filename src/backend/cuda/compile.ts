// Kernel sources (.cu files, read at run time, after the #defines they share with
// TypeScript: kernel-defines.ts) -> CUBIN for the GPU in hand, compiled by NVRTC at
// first use and cached on disk:
//   $QUIRE_CACHE_DIR or ~/.cache/quire/kernels / <sha256(source + arch + nvrtc version + options)>.cubin

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { threadId } from 'node:worker_threads';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readKnob } from '../../knobs/knobs.js';
import { moduleDefines } from './kernel-defines.js';
import { NVRTC_OPTIONS } from './ffi/nvrtc.js';

const KERNELS_REL = join('src', 'backend', 'cuda', 'kernels');

/**
 * The kernels folder of the package: next to this file when run from src/, or
 * src/backend/cuda/kernels of the package root when run from dist/src/backend/cuda/.
 */
export function kernelDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const beside = join(here, 'kernels');
  if (existsSync(join(beside, 'common.cuh'))) return beside;
  for (let dir = here; ; dir = dirname(dir)) {
    const candidate = join(dir, KERNELS_REL);
    if (existsSync(join(candidate, 'common.cuh'))) return candidate;
    if (dirname(dir) === dir) break;
  }
  throw new Error(`CUDA kernel sources not found: looked for ${KERNELS_REL} above ${here}`);
}

export function kernelFiles(dir = kernelDir()): string[] {
  return readdirSync(dir).filter((f) => f.endsWith('.cu')).sort();
}

/** The .cu file with its local `#include "x.cuh"` lines replaced by the headers (each once). */
export function expandSource(file: string, dir = kernelDir(), seen = new Set<string>()): string {
  const text = readFileSync(resolve(dir, file), 'utf8');
  return text.split('\n').map((line) => {
    const m = /^\s*#include\s+"([^"]+)"\s*$/.exec(line);
    if (!m) return line.replace(/^\s*#pragma once\s*$/, '');
    const header = m[1]!;
    if (seen.has(header)) return '';
    seen.add(header);
    return expandSource(header, dir, seen);
  }).join('\n');
}

/**
 * Kernel files built for the architecture's own features where the device has them (sm_90a: Hopper's wgmma), whose
 * cubins run on that architecture alone; every other file builds for the plain sm_<arch>, so its code does not depend
 * on which Hopper-only instructions exist.
 */
const ARCH_SPECIFIC_FILES: ReadonlySet<string> = new Set(['moe_wgmma.cu']);

/** NVRTC's target for a kernel file on a device of compute capability `arch` (90 -> "90a" for ARCH_SPECIFIC_FILES). */
export function compileTarget(file: string, arch: number): string {
  return arch === 90 && ARCH_SPECIFIC_FILES.has(file) ? '90a' : `${arch}`;
}

export function cubinCacheKey(source: string, arch: number | string, nvrtcVersion: string, options: readonly string[] = NVRTC_OPTIONS): string {
  return createHash('sha256').update(source).update(`\0sm_${arch}\0nvrtc ${nvrtcVersion}\0${options.join(' ')}`).digest('hex');
}

export function kernelCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const dir = readKnob('QUIRE_CACHE_DIR', env);
  return dir ? resolve(dir) : join(homedir(), '.cache', 'quire', 'kernels');
}

export interface Compiler {
  version: string;
  /** arch: compileTarget's (e.g. "90", "90a"). */
  compile(source: string, name: string, arch: string): Uint8Array;
}

/**
 * QUIRE_KERNEL_DEFINES (developers' A/B runs): `NAME=VALUE,...` prepended to every kernel source as #defines (part
 * of the cache key), so one build runs a kernel's compile-time variants side by side.
 */
export function kernelDefines(env: NodeJS.ProcessEnv = process.env): string {
  const spec = readKnob('QUIRE_KERNEL_DEFINES', env) ?? '';
  return spec.split(',').filter((d) => d.trim() !== '').map((d) => {
    const [name, value] = d.split('=').map((x) => x.trim());
    return `#define ${name} ${value}\n`;
  }).join('');
}

/**
 * The text NVRTC compiles for a kernel file: QUIRE_KERNEL_DEFINES, then the constants it shares with TypeScript
 * (kernel-defines.ts), then the file with its headers inlined.
 */
export function kernelSource(file: string, env: NodeJS.ProcessEnv = process.env): string {
  return kernelDefines(env) + moduleDefines(file) + expandSource(file);
}

/** CUBIN of one kernel file for sm_<arch>, from the disk cache or compiled (and cached). */
export function loadCubin(file: string, arch: number, compiler: Compiler, cacheDir = kernelCacheDir()): Uint8Array {
  const source = kernelSource(file);
  const target = compileTarget(file, arch);
  const path = join(cacheDir, `${cubinCacheKey(source, target, compiler.version)}.cubin`);
  if (existsSync(path)) return new Uint8Array(readFileSync(path));
  const cubin = compiler.compile(source, file, target);
  try {
    mkdirSync(cacheDir, { recursive: true });
    // the thread too: data-parallel replicas are threads of one process, and may compile the same kernel at once
    const tmp = `${path}.${process.pid}.${threadId}.tmp`;
    writeFileSync(tmp, cubin);
    renameSync(tmp, path);
  } catch {
    // a read-only cache only costs a recompile next time
  }
  return cubin;
}
