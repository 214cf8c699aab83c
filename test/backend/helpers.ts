import type { HostTensor } from '../../src/loader/types.js';
import type { ForwardBatch } from '../../src/backend/batch.js';
import { seededRandom } from '../../src/model/random-weights.js';

/** Random values in [lo, hi), never all zero. */
export function randomArray(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const rand = seededRandom(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * rand();
  return out;
}

export function hostF32(name: string, shape: number[], values: Float32Array): HostTensor {
  return { name, dtype: 'f32', shape, data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) };
}

export function assertClose(actual: Float32Array, expected: ArrayLike<number>, tol: number, what: string): void {
  if (actual.length !== expected.length) throw new Error(`${what}: length ${actual.length} != ${expected.length}`);
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    if (!(Math.abs(a - e) <= tol * (1 + Math.abs(e)))) throw new Error(`${what}[${i}]: ${a} != ${e}`);
  }
}

/** A batch of one or more sequences, each a chunk [start, start + n) with its own page list. */
export function batchOf(seqs: { ids: number[]; start: number; pages: number[] }[], blockSize: number,
  logitsRows?: number[]): ForwardBatch {
  const numTokens = seqs.reduce((n, s) => n + s.ids.length, 0);
  const maxBlocksPerSeq = Math.max(1, ...seqs.map((s) => s.pages.length));
  const b: ForwardBatch = {
    numTokens, numSeqs: seqs.length, inputIds: new Int32Array(numTokens), positions: new Int32Array(numTokens),
    slotMapping: new Int32Array(numTokens), queryStartLoc: new Int32Array(seqs.length + 1),
    seqLens: new Int32Array(seqs.length), blockTables: new Int32Array(seqs.length * maxBlocksPerSeq),
    maxBlocksPerSeq, logitsIndices: new Int32Array(logitsRows ?? []),
  };
  let t = 0;
  seqs.forEach((s, i) => {
    b.queryStartLoc[i] = t;
    s.ids.forEach((id, j) => {
      const pos = s.start + j;
      b.inputIds[t] = id;
      b.positions[t] = pos;
      b.slotMapping[t] = s.pages[Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize);
      t++;
    });
    b.seqLens[i] = s.start + s.ids.length;
    b.blockTables.set(s.pages, i * maxBlocksPerSeq);
  });
  b.queryStartLoc[seqs.length] = t;
  return b;
}

/** Fisher-Yates with a seeded RNG. */
export function shuffled(n: number, seed: number): number[] {
  const rand = seededRandom(seed);
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

/** A batch of the fields the DeltaNet ops read: each sequence's rows, its kv length after the step, its state slot. */
export function seqBatch(seqs: { n: number; start: number; slot: number }[]): ForwardBatch {
  const q = new Int32Array(seqs.length + 1);
  seqs.forEach((s, i) => (q[i + 1] = q[i]! + s.n));
  const T = q[seqs.length]!;
  return { numTokens: T, numSeqs: seqs.length, inputIds: new Int32Array(T), positions: new Int32Array(T),
    slotMapping: new Int32Array(T).fill(-1), queryStartLoc: q, seqLens: Int32Array.from(seqs, (s) => s.start + s.n),
    blockTables: new Int32Array(seqs.length), maxBlocksPerSeq: 1, logitsIndices: new Int32Array(0),
    stateSlots: Int32Array.from(seqs, (s) => s.slot) };
}
