// Finds the CUDA shared libraries: the driver (libcuda, from the GPU driver),
// NVRTC, cuBLASLt and NCCL (from a CUDA toolkit or the Python nvidia-* wheels).
// Runs no Python: site-packages folders are found by globbing known prefixes.

import { existsSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export type CudaLibrary = 'cuda' | 'nvrtc' | 'cublasLt' | 'nccl';

export const SONAMES: Record<CudaLibrary, string[]> = {
  cuda: ['libcuda.so.1', 'libcuda.so'],
  nvrtc: ['libnvrtc.so.13', 'libnvrtc.so.12', 'libnvrtc.so'],
  cublasLt: ['libcublasLt.so.13', 'libcublasLt.so.12', 'libcublasLt.so'],
  // one soname for every CUDA major: the nvidia-nccl-cu12 and -cu13 wheels both put it in nvidia/nccl/lib
  nccl: ['libnccl.so.2', 'libnccl.so'],
};

const HOW_TO_GET: Record<CudaLibrary, string> = {
  cuda: 'install the NVIDIA driver (libcuda.so.1 ships with it), or check that this machine has a GPU',
  nvrtc: 'install the CUDA toolkit (and set CUDA_HOME), or `pip install nvidia-cuda-nvrtc`',
  cublasLt: 'install the CUDA toolkit (and set CUDA_HOME), or `pip install nvidia-cublas`',
  nccl: '`pip install nvidia-nccl-cu12` (nvidia-nccl-cu13 beside CUDA 13), or install NCCL beside the CUDA toolkit ' +
    '(libnccl2 from NVIDIA\'s package repository); only tensor-parallel serving (more than one GPU) needs it',
};

export class LibraryNotFoundError extends Error {
  constructor(readonly library: CudaLibrary, readonly searched: string[]) {
    super(`${SONAMES[library][0]} not found. Looked in: ${searched.join(', ') || '(nowhere)'}` +
      ` and the system loader path. To get it: ${HOW_TO_GET[library]}.`);
    this.name = 'LibraryNotFoundError';
  }
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** site-packages / dist-packages folders of every Python install found on disk. */
export function pythonPackageDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const prefixes = ['/usr/lib', '/usr/local/lib', join(homedir(), '.local/lib'), '/opt/conda/lib'];
  for (const v of [env.CONDA_PREFIX, env.VIRTUAL_ENV]) if (v) prefixes.push(join(v, 'lib'));
  const dirs: string[] = ['/usr/lib/python3/dist-packages'];
  for (const prefix of prefixes) {
    for (const name of listDir(prefix)) {
      if (!/^python3(\.\d+)?$/.test(name)) continue;
      for (const kind of ['site-packages', 'dist-packages']) dirs.push(join(prefix, name, kind));
    }
  }
  return dirs.filter((d) => existsSync(d));
}

/** Every folder the libraries may sit in, most specific first. */
export function candidateDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const dirs: string[] = [];
  for (const home of [env.CUDA_HOME, env.CUDA_PATH]) {
    if (home) dirs.push(join(home, 'lib64'), join(home, 'lib'));
  }
  dirs.push('/usr/local/cuda/lib64');
  for (const d of (env.LD_LIBRARY_PATH ?? '').split(':')) if (d) dirs.push(d);
  for (const site of pythonPackageDirs(env)) {
    const nvidia = join(site, 'nvidia');
    for (const pkg of listDir(nvidia)) dirs.push(join(nvidia, pkg, 'lib'));
  }
  dirs.push('/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib/wsl/lib');
  return [...new Set(dirs)];
}

/**
 * Full paths to try for a library, in order; the bare sonames come last so the
 * system loader (ldconfig cache) gets its turn.
 */
export function libraryCandidates(lib: CudaLibrary, env: NodeJS.ProcessEnv = process.env): string[] {
  const out: string[] = [];
  for (const soname of SONAMES[lib]) {
    for (const dir of candidateDirs(env)) {
      const p = join(dir, soname);
      if (existsSync(p)) out.push(p);
    }
  }
  return [...out, ...SONAMES[lib]];
}

/** Loads the first candidate `load` accepts; one error naming the library and where it looked otherwise. */
export function loadLibrary<T>(lib: CudaLibrary, load: (path: string) => T,
  env: NodeJS.ProcessEnv = process.env): T {
  for (const path of libraryCandidates(lib, env)) {
    try {
      return load(path);
    } catch {
      // next candidate
    }
  }
  throw new LibraryNotFoundError(lib, candidateDirs(env));
}
