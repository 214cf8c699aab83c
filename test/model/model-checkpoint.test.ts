import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { loadModelConfig } from '../../src/loader/config.js';
import { openWeights } from '../../src/loader/model-dir.js';
import { writeSafetensors } from '../../src/loader/safetensors-write.js';
import { Model } from '../../src/model/model.js';
import { randomWeightSource, tinyConfig } from '../../src/model/random-weights.js';
import { runSteps } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'quire-model-'));
const backend = new CpuBackend({ kvCacheBytes: 1 << 22, numThreads: 1 });
after(() => {
  backend.dispose();
  rmSync(dir, { recursive: true, force: true });
});

test('a model loaded from a safetensors directory computes the same logits as from memory', async () => {
  const config = tinyConfig('qwen3');
  const memory = randomWeightSource(config, { seed: 5 });
  await writeSafetensors(join(dir, 'model.safetensors'), memory.names().map((n) => memory.read(n)));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({
    architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', hidden_size: config.hiddenSize,
    intermediate_size: config.intermediateSize, num_hidden_layers: config.numLayers,
    num_attention_heads: config.numHeads, num_key_value_heads: config.numKvHeads, head_dim: config.headDim,
    vocab_size: config.vocabSize, max_position_embeddings: config.maxPositionEmbeddings,
    rope_theta: config.ropeTheta, rms_norm_eps: config.rmsNormEps, tie_word_embeddings: true,
    hidden_act: 'silu', torch_dtype: 'bfloat16',
  }));
  const loaded = loadModelConfig(join(dir, 'config.json'));
  assert.deepEqual(loaded, config);
  const prompt = { a: [5, 9, 1, 33, 70, 2, 2, 8] };
  const plan = [[{ seq: 'a', start: 0, end: 8 }]];
  const fromDisk = runSteps(Model.load(loaded, openWeights(dir), backend), prompt, plan, 1).get('a');
  const fromMemory = runSteps(Model.load(config, memory, backend), prompt, plan, 1).get('a');
  assert.deepEqual(fromDisk, fromMemory);
});
