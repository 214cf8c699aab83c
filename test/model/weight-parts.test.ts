// Fused weights as parts (src/model/architectures/weight-parts.ts): row runs, the byte plan and its shapes, the host
// gather with and without ranged reads, and a backend's streamed upload taking the same bytes as the host's.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Tensor } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { parseModelConfig } from '../../src/loader/config.js';
import type { ByteSegment, DType, HostTensor, WeightSource } from '../../src/loader/types.js';
import { loadQwen35Weights } from '../../src/model/architectures/qwen3_5-weights.js';
import { gatherParts, partsUploader, planParts, rowRuns } from '../../src/model/architectures/weight-parts.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
after(() => backend.dispose());

/** A source of f32 tensors whose element i is i + base (so every byte says where it came from), by name. */
function countingSource(shapes: Record<string, number[]>, ranged: boolean, dtype: DType = 'f32'): WeightSource {
  const names = Object.keys(shapes);
  const read = (n: string): HostTensor => {
    const shape = shapes[n]!;
    const v = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => 1000 * names.indexOf(n) + i);
    return { name: n, dtype, shape: [...shape], data: new Uint8Array(v.buffer) };
  };
  const source: WeightSource = { names: () => names, has: (n) => n in shapes, read,
    info: (n) => ({ dtype, shape: [...shapes[n]!], file: 'model.safetensors' }) };
  if (ranged) source.readInto = (n, offset, dest) => dest.set(read(n).data.subarray(offset, offset + dest.byteLength));
  return source;
}

const f32 = (t: HostTensor) => Array.from(new Float32Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 4));

test('rowRuns: an index list as the fewest ranges, in order', () => {
  assert.deepEqual(rowRuns([0, 1, 2, 7, 8]), [[0, 3], [7, 9]]);
  assert.deepEqual(rowRuns([4, 5, 0, 1, 6]), [[4, 6], [0, 2], [6, 7]]);
  assert.deepEqual(rowRuns([3, 3]), [[3, 4], [3, 4]]);
  assert.deepEqual(rowRuns([]), []);
});

test('the plan: row ranges as byte ranges, adjacent ones of a tensor merged; 2-D [rows, width], 1-D parts 1-D', () => {
  const src = countingSource({ a: [4, 3], b: [2, 3], e: [2, 2, 3], n: [5], m: [2] }, true);
  const plan = planParts(src, 'w', [{ name: 'a', rows: [[2, 4], [0, 1], [1, 2]] }, 'b', 'e']);
  assert.deepEqual(plan.shape, [4 + 2 + 4, 3]);
  assert.deepEqual(plan.segments, [{ name: 'a', offset: 24, bytes: 24 }, { name: 'a', offset: 0, bytes: 24 },
    { name: 'b', offset: 0, bytes: 24 }, { name: 'e', offset: 0, bytes: 48 }]);
  assert.deepEqual(planParts(src, 'v', ['n', 'm']).shape, [7]);
  assert.deepEqual(planParts(src, 'c', [{ name: 'e', rows: [[0, 4]] }]).shape, [4, 3], '[E, N, K] as E N rows of K');
  assert.throws(() => planParts(src, 'x', ['a', 'n']),
    /x: part n is f32\[5\], not of the first part's dtype and row width/);
  assert.throws(() => planParts(src, 'x', [{ name: 'a', rows: [[3, 5]] }]), /x: rows \[3, 5\) of a, which has 4/);
  assert.throws(() => planParts(src, 'x', [{ name: 'a', rows: [[2, 2]] }]), /rows \[2, 2\) of a/);
  assert.throws(() => planParts(src, 'x', []), /x: no parts/);
});

test('the host gather reads the planned rows, by ranges or from whole tensors alike', () => {
  const shapes = { a: [4, 2], b: [1, 2] };
  const parts = [{ name: 'a', rows: [[3, 4], [0, 2]] as const }, 'b'];
  for (const ranged of [true, false]) {
    const src = countingSource(shapes, ranged);
    const t = gatherParts(src, 'w', planParts(src, 'w', parts));
    assert.deepEqual(t.shape, [4, 2]);
    assert.deepEqual(f32(t), [6, 7, 0, 1, 2, 3, 1000, 1001], ranged ? 'ranged reads' : 'whole tensors');
  }
});

/** The CPU backend with a streamed upload that takes the segments' bytes as a device would (readInto), recorded. */
class StreamingCpu extends CpuBackend {
  readonly streamed: { name: string; segments: readonly ByteSegment[] }[] = [];
  uploadSegments(name: string, source: WeightSource, segments: readonly ByteSegment[],
    shape: readonly number[]): Tensor {
    this.streamed.push({ name, segments });
    const data = new Uint8Array(segments.reduce((n, s) => n + s.bytes, 0));
    let at = 0;
    for (const s of segments) {
      source.readInto!(s.name, s.offset, data.subarray(at, at += s.bytes));
    }
    return this.upload({ name, dtype: source.info(segments[0]!.name).dtype, shape: [...shape], data });
  }
}

test('the streamed upload is taken only for parts of the compute dtype, from a source that reads by ranges', () => {
  const b = new StreamingCpu({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
  try {
    partsUploader(countingSource({ a: [2, 2] }, true), b)('a', ['a']);
    partsUploader(countingSource({ a: [2, 2] }, false), b)('a', ['a']);
    partsUploader(countingSource({ h: [2, 2] }, true, 'bf16'), b)('h', [{ name: 'h', rows: [[0, 1]] }]);
    assert.deepEqual(b.streamed.map((s) => s.name), ['a'], 'f32 parts from a ranged source only');
  } finally {
    b.dispose();
  }
});

test('a Qwen3.5 model streamed (q_proj cut per head, DeltaNet projections fused) loads the host path\'s tensors',
  () => {
  const config = { ...parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c'), dtype: 'f32' as const };
  const base = randomWeightSource(config, { seed: 5 });
  const ranged: WeightSource = { ...base,
    readInto: (n, offset, dest) => dest.set(base.read(n).data.subarray(offset, offset + dest.byteLength)) };
  const b = new StreamingCpu({ kvCacheBytes: 1 << 20, numThreads: 1, kernel: 'js' });
  try {
    const viaHost = loadQwen35Weights(config, base, backend);
    const streamed = loadQwen35Weights(config, ranged, b);
    const gate = b.streamed.find((s) => s.name.endsWith('layers.1.self_attn.gate_proj.weight'))!;
    assert.equal(gate.segments.length, config.numHeads, 'one range a head');
    const tensors = (w: typeof viaHost, k: CpuBackend) => w.layers.flatMap((l) => [l.inputNorm, l.postAttentionNorm,
      ...Object.values(l.attention ?? {}), ...Object.values(l.deltaNet ?? {}), l.gateUp!, l.down!])
      .map((t) => ({ shape: t.shape, values: Array.from(k.toHost(t)) }));
    assert.deepEqual(tensors(streamed, b), tensors(viaHost, backend));
    assert.ok(b.streamed.length > 10, `${b.streamed.length} weights streamed`);
  } finally {
    b.dispose();
  }
});
