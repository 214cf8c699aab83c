import { E4M3_MAX } from '../../loader/fp8.js';
import { bytesToF32, f32ToBytes, f32ToE4m3 } from '../../loader/dtype.js';
import type { TensorSpec } from '../../loader/safetensors-write.js';
import type { FloatDType } from '../../loader/types.js';
import { quantizeWeightBlocks } from '../../backend/fp8-linear.js';
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
  const numElements = spec.shape.reduce((a, b) => a * b, 1);
  if (repeatChunks) {
    // one chunk's window of its init's shared stream, at an offset of its own name, repeated: nothing is drawn
    // per tensor (a 30B model's 18,867 tensors are written at memory speed, not in six minutes of drawing)
    const stream = sharedStream(spec.dtype, seed, init);
    const bytesPerElement = stream.byteLength / (2 * CHUNK_ELEMENTS);
    const start = (streamSeed(seed, spec.name) % CHUNK_ELEMENTS) * bytesPerElement;
    const first = stream.subarray(start, start + Math.min(numElements, CHUNK_ELEMENTS) * bytesPerElement);
    for (let at = 0; at < numElements; at += CHUNK_ELEMENTS) {
      yield first.subarray(0, Math.min(CHUNK_ELEMENTS, numElements - at) * bytesPerElement);
    }
    return;
  }
  const prng = new Prng(streamSeed(seed, spec.name));
  const table = new Float32Array(TABLE_SIZE);
  for (let i = 0; i < TABLE_SIZE; i++) table[i] = init.mean + init.std * prng.nextNormal();
  if (spec.dtype === 'f32') {
    for (let start = 0; start < numElements; start += CHUNK_ELEMENTS) {
      const n = Math.min(CHUNK_ELEMENTS, numElements - start);
      const out = new Float32Array(n);
      fillFromTable(out, table, prng);
      yield new Uint8Array(out.buffer);
    }
    return;
  }
  if (spec.dtype === 'f8_e4m3') {
    const codes = f32ToE4m3(table);
    for (let start = 0; start < numElements; start += CHUNK_ELEMENTS) {
      const out = new Uint8Array(Math.min(CHUNK_ELEMENTS, numElements - start));
      fillFromTable(out, codes, prng);
      yield out;
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

const sharedStreams = new Map<string, Uint8Array>();

/** Two chunks of the normal stream of (dtype, seed, init), drawn once per process: what --fast windows into. */
function sharedStream(dtype: TensorSpec['dtype'], seed: number, init: WeightInit): Uint8Array {
  const key = `${dtype} ${seed} ${init.mean} ${init.std}`;
  let stream = sharedStreams.get(key);
  if (!stream) {
    const chunks = [...randomTensorChunks({ name: key, dtype, shape: [2 * CHUNK_ELEMENTS] }, seed, init)];
    stream = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
    let at = 0;
    for (const c of chunks) {
      stream.set(c, at);
      at += c.byteLength;
    }
    sharedStreams.set(key, stream);
  }
  return stream;
}

/** A normal weight's 128 x 128 block spans about 4 std: at its scale (absmax / 448) the std is 448 / 4 codes' worth. */
const FP8_STD_PER_SCALE = E4M3_MAX / 4;

/**
 * The chunks of each tensor of a checkpoint, asked for in file order: randomTensorChunks, except block-FP8
 * projections (f8_e4m3 specs) and their weight_scale_inv. Such a weight is the one written without
 * --quantization (of `dtype`, the same seed) quantized by quantizeWeightBlocks, its scales what that gave. With
 * repeatChunks (--fast) instead: e4m3 codes of normal samples (never the NaN codes: rounding saturates at 448) and
 * one scale for every block, such that the weights have the std they would have unquantized.
 */
export function checkpointChunks(dtype: FloatDType, seed: number, linearStd: number,
  repeatChunks: boolean): (spec: TensorSpec) => Iterable<Uint8Array> {
  const scales = new Map<string, Float32Array>();
  return function* (spec) {
    const init = initFor(spec.name, linearStd);
    const weight = spec.name.endsWith('.weight_scale_inv') ? spec.name.slice(0, -'_scale_inv'.length) : null;
    if (weight !== null) {
      const numScales = spec.shape.reduce((a, b) => a * b, 1);
      const s = repeatChunks ? new Float32Array(numScales).fill(initFor(weight, linearStd).std / FP8_STD_PER_SCALE)
        : scales.get(spec.name);
      if (!s) throw new Error(`${spec.name} is written before ${weight}`);
      scales.delete(spec.name);
      yield new Uint8Array(s.buffer);
    } else if (spec.dtype !== 'f8_e4m3') {
      yield* randomTensorChunks(spec, seed, init, repeatChunks);
    } else if (repeatChunks) {
      yield* randomTensorChunks(spec, seed, { mean: 0, std: FP8_STD_PER_SCALE }, true);
    } else {
      const [N, K] = spec.shape as [number, number];
      const w = new Float32Array(N * K);
      let offset = 0;
      for (const chunk of randomTensorChunks({ ...spec, dtype }, seed, init)) {
        const values = bytesToF32(dtype, chunk);
        w.set(values, offset);
        offset += values.length;
      }
      const { q, scaleInv } = quantizeWeightBlocks(w, N, K);
      scales.set(`${spec.name}_scale_inv`, scaleInv);
      yield f32ToE4m3(q);
    }
  };
}

function fillFromTable(out: Float32Array | Uint16Array | Uint8Array, table: Float32Array | Uint16Array | Uint8Array,
  prng: Prng): void {
  let i = 0;
  for (; i + 1 < out.length; i += 2) {
    const r = prng.nextU32();
    out[i] = table[r & 0xffff]!;
    out[i + 1] = table[r >>> 16]!;
  }
  if (i < out.length) out[i] = table[prng.nextU32() & 0xffff]!;
}
