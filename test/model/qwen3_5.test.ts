// The Qwen3.5 hybrid text model on the CPU backend: its layers and their state, the output-gated attention against
// its formula, and one sequence's logits the same however its tokens are split into steps and whatever shares them.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { buildForwardBatch, type ScheduledSeq } from '../../src/engine/batch-builder.js';
import { parseModelConfig } from '../../src/loader/config.js';
import { bytesToF32 } from '../../src/loader/dtype.js';
import { GatedAttention } from '../../src/model/layers/gated-attention.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource } from '../../src/model/random-weights.js';
import { testModelShapes } from '../../src/tools/test-model/shapes.js';
import { assertBatchedAsAlone } from './helpers.js';

const BLOCK = 16;
const config = { ...parseModelConfig(testModelShapes()['tiny-qwen3.5'], 'c'), dtype: 'f32' as const };
const source = randomWeightSource(config, { seed: 5 });
const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
after(() => backend.dispose());
const model = Model.load(config, source, backend);
backend.allocateKvCache(model.kvCacheSpec(32, BLOCK));
backend.allocateRecurrentState(model.recurrentStateLayout(4)!);

function step(seqs: (ScheduledSeq & { slot: number })[], allRows = false): Float32Array {
  const batch = buildForwardBatch(seqs, BLOCK);
  batch.stateSlots = Int32Array.from(seqs, (s) => s.slot);
  if (allRows) batch.logitsIndices = Int32Array.from({ length: batch.numTokens }, (_, i) => i);
  return model.forward(batch);
}

const prompt = [5, 17, 300, 42, 9, 77, 128, 3, 250, 11];

test('layers: DeltaNet and gated attention as layer_types says; one KV shape over the attention layers, one state shape', () => {
  assert.deepEqual(model.layerStateSpecs().map((s) => s?.kind), ['recurrent', 'full_attention', 'recurrent', 'full_attention']);
  assert.deepEqual(model.kvCacheSpec(7, BLOCK), { numBlocks: 7, blockSize: BLOCK, numLayers: 2, numKvHeads: 2, headDim: 16 });
  assert.deepEqual(model.recurrentStateLayout(3), { numSlots: 3, numLayers: 2,
    shape: { numKeyHeads: 2, numValueHeads: 4, keyDim: 16, valueDim: 8, convKernel: 4 } });
  assert.equal(model.kvBytesPerToken(), 2 * 2 * 2 * 16 * 4);
});

test('gated attention of one token at position 0: o(sigmoid(x gate^T) * v of its kv head)', () => {
  const layer = model.parts.layers[1]!.mixer as GatedAttention;
  const hidden = config.hiddenSize;
  const x = Float32Array.from({ length: hidden }, (_, i) => Math.sin(i));
  const batch = buildForwardBatch([{ tokenIds: [1], startPosition: 0, blockTable: [1], sample: true }], BLOCK);
  const st = backend.beginStep(batch);
  const out = layer.forward(backend.upload({ name: 'x', dtype: 'f32', shape: [1, hidden], data: new Uint8Array(x.buffer) }),
    { backend, step: st, eps: config.rmsNormEps, tp: null });
  assert.ok('input' in out);
  const got = backend.toHost(out.input);
  const w = (n: string) => bytesToF32('f32', source.read(`model.layers.1.self_attn.${n}.weight`).data);
  const [q, v] = [w('q_proj'), w('v_proj')];
  const row = (m: Float32Array, r: number) => m.subarray(r * hidden, (r + 1) * hidden).reduce((a, e, i) => a + e * x[i]!, 0);
  const D = 16;
  for (let h = 0; h < 4; h++) {
    for (let d = 0; d < D; d++) {
      // q_proj's head h: D query rows then D gate rows; softmax over one key is 1, so attention gives v
      const gate = row(q, h * 2 * D + D + d);
      const expected = row(v, Math.floor(h / 2) * D + d) / (1 + Math.exp(-gate));
      assert.ok(Math.abs(got[h * D + d]! - expected) < 1e-5 * (1 + Math.abs(expected)), `head ${h} channel ${d}`);
    }
  }
});

test('a prompt in one step, in chunks, and token by token gives the same logits at every position', () => {
  const vocab = config.vocabSize;
  const whole = step([{ tokenIds: prompt, startPosition: 0, blockTable: [1], sample: false, slot: 0 }], true);
  const splits = [[4, 3, 3], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [7, 1, 2]];
  for (const split of splits) {
    let at = 0;
    for (const n of split) {
      const logits = step([{ tokenIds: prompt.slice(at, at + n), startPosition: at, blockTable: [2], sample: false, slot: 1 }], true);
      for (let i = 0; i < n; i++) {
        const a = logits.subarray(i * vocab, (i + 1) * vocab);
        const b = whole.subarray((at + i) * vocab, (at + i + 1) * vocab);
        for (let j = 0; j < vocab; j++) assert.ok(Math.abs(a[j]! - b[j]!) < 1e-4, `split ${split}: position ${at + i}, logit ${j}: ${a[j]} vs ${b[j]}`);
      }
      at += n;
    }
  }
});

test('sequences batched together give the bits each gives alone (own slots, own pages)', () => {
  const other = assertBatchedAsAlone(step, prompt);
  // and a decode step of both continues each from its own state
  const next = step([{ tokenIds: [1], startPosition: prompt.length, blockTable: [3], sample: true, slot: 2 },
    { tokenIds: [2], startPosition: other.length, blockTable: [4], sample: true, slot: 3 }]);
  const ref = step([{ tokenIds: [...prompt, 1], startPosition: 0, blockTable: [5], sample: true, slot: 0 }]);
  assert.deepEqual(next.subarray(0, config.vocabSize), ref);
});
