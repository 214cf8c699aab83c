import { f32ToBytes } from '../../loader/dtype.js';
import type { TensorSpec } from '../../loader/safetensors-write.js';
import { Prng, streamSeed } from './prng.js';

export interface WeightInit {
  /** Values are mean + std * N(0, 1). */
  mean: number;
  std: number;
}

const TABLE_BITS = 16;
const TABLE_SIZE = 1 << TABLE_BITS;
const CHUNK_ELEMENTS = 1 << 22;

/** Norm weights sit near 1, biases are large enough to matter (as Qwen2's are), the rest a linear init. */
export function initFor(name: string, linearStd: number): WeightInit {
  if (name.endsWith('norm.weight')) return { mean: 1, std: 0.05 };
  return name.endsWith('.bias') ? { mean: 0, std: 0.5 } : { mean: 0, std: linearStd };
}

/*
 * Elements are drawn from a table of 65536 normal samples (in the target dtype)
 * indexed by the PRNG, two 16-bit indices per 32-bit draw: a 16 GB model is
 * written in minutes instead of the hour that per-element Box-Muller takes.
 */
export function* randomTensorChunks(spec: TensorSpec, seed: number, init: WeightInit,
  repeatChunks = false): Generator<Uint8Array> {
  const prng = new Prng(streamSeed(seed, spec.name));
  const table = new Float32Array(TABLE_SIZE);
  for (let i = 0; i < TABLE_SIZE; i++) table[i] = init.mean + init.std * prng.nextNormal();
  const numElements = spec.shape.reduce((a, b) => a * b, 1);
  if (repeatChunks) {
    const first = randomTensorChunks({ ...spec, shape: [Math.min(numElements, CHUNK_ELEMENTS)] }, seed, init).next().value!;
    const bytesPerElement = first.byteLength / Math.min(numElements, CHUNK_ELEMENTS);
    for (let start = 0; start < numElements; start += CHUNK_ELEMENTS) {
      yield first.subarray(0, Math.min(CHUNK_ELEMENTS, numElements - start) * bytesPerElement);
    }
    return;
  }
  if (spec.dtype === 'f32') {
    for (let start = 0; start < numElements; start += CHUNK_ELEMENTS) {
      const n = Math.min(CHUNK_ELEMENTS, numElements - start);
      const out = new Float32Array(n);
      fillFromTable(out, table, prng);
      yield new Uint8Array(out.buffer);
    }
    return;
  }
  const tableBits = new Uint16Array(f32ToBytes(spec.dtype, table).buffer);
  for (let start = 0; start < numElements; start += CHUNK_ELEMENTS) {
    const n = Math.min(CHUNK_ELEMENTS, numElements - start);
    const out = new Uint16Array(n);
    fillFromTable(out, tableBits, prng);
    yield new Uint8Array(out.buffer);
  }
}

function fillFromTable(out: Float32Array | Uint16Array, table: Float32Array | Uint16Array, prng: Prng): void {
  let i = 0;
  for (; i + 1 < out.length; i += 2) {
    const r = prng.nextU32();
    out[i] = table[r & 0xffff]!;
    out[i + 1] = table[r >>> 16]!;
  }
  if (i < out.length) out[i] = table[prng.nextU32() & 0xffff]!;
}
