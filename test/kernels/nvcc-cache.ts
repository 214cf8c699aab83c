// nvcc runs remembered by what decides their result: nvcc's version, its arguments and the source text.
// A success is kept under .quire-cache/nvcc/<sha256> (git-ignored), so an unchanged kernel is not compiled
// again; a failure is never kept.

import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

export const NVCC_CACHE_DIR = join('.quire-cache', 'nvcc');

/** Compiles `source` (named `name`) with `args`, writing the result to `out`; returns nothing, throws on failure. */
export type NvccRun = (args: string[], source: string, name: string, out: string) => Promise<void>;

const execFileAsync = promisify(execFile);

export const runNvcc: NvccRun = async (args, source, name, out) => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-nvcc-'));
  try {
    const src = join(dir, name);
    writeFileSync(src, source);
    await execFileAsync('nvcc', [...args, '-o', out, src]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

export function nvccVersion(): string | null {
  const r = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout : null;
}

export function nvccCacheKey(version: string, args: readonly string[], source: string): string {
  return createHash('sha256').update(JSON.stringify([version, args, source])).digest('hex');
}

/**
 * The output nvcc writes for `source` (a PTX text, a fatbin), from the cache when this version, these
 * arguments and this source compiled before.
 */
export async function nvccCached(args: string[], source: string, name: string,
  opts: { version: string; cacheDir?: string; run?: NvccRun }): Promise<Buffer> {
  const cacheDir = opts.cacheDir ?? NVCC_CACHE_DIR;
  const entry = join(cacheDir, nvccCacheKey(opts.version, args, source));
  if (existsSync(entry)) return readFileSync(entry);
  mkdirSync(cacheDir, { recursive: true });
  const partial = `${entry}.${process.pid}.partial`;
  try {
    await (opts.run ?? runNvcc)(args, source, name, partial);
    renameSync(partial, entry);
  } finally {
    rmSync(partial, { force: true });
  }
  return readFileSync(entry);
}
