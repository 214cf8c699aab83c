import { test } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderChat } from '../../src/loader/chat-template.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { loadGenerationConfig, parseGenerationConfig } from '../../src/loader/generation-config.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { tensorSpecsForConfig } from '../../src/tools/test-model/shapes.js';
import { tempDir } from './helpers.js';

function loadError(dir: string, message: string): void {
  assert.throws(
    () => loadModelDir(dir),
    (e: unknown) => e instanceof ModelLoadError && e.message.startsWith(message),
  );
}

test('a generated tiny-qwen3 directory loads back whole', async () => {
  const dir = join(tempDir(), 'tiny-qwen3');
  const made = await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, seed: 3 });
  const m = loadModelDir(dir);
  assert.equal(m.dir, dir);
  assert.equal(m.config.architecture, 'qwen3');
  assert.equal(m.config.tieWordEmbeddings, true);
  assert.equal(m.config.headDim, 16);
  assert.deepEqual(m.weights.names(), tensorSpecsForConfig(made.config, 'bf16').map((s) => s.name));
  assert.equal(m.weights.has('lm_head.weight'), false);
  assert.deepEqual(m.weights.info('model.layers.1.self_attn.q_norm.weight'), { dtype: 'bf16', shape: [16], file: join(dir, 'model.safetensors') });
  const imEnd = m.tokenizer.encode('<|im_end|>')[0]!;
  const endOfText = m.tokenizer.encode('<|endoftext|>')[0]!;
  assert.deepEqual(m.generation.eosTokenIds, [imEnd, endOfText], 'generation_config ids first, tokenizer eos merged in');
  assert.equal(m.generation.bosTokenId, endOfText);
  assert.equal(m.generation.temperature, 0.6);
  assert.equal(m.eosToken, '<|im_end|>');
  const prompt = renderChat(m.chatTemplate!, [{ role: 'user', content: 'Hello' }], { addGenerationPrompt: true });
  assert.equal(m.tokenizer.decode(m.tokenizer.encode(prompt)), prompt);
});

test('a generated sharded tiny-llama directory loads back, chat_template.jinja wins', async () => {
  const dir = join(tempDir(), 'tiny-llama');
  await makeTestModel({ shape: 'tiny-llama', outDir: dir, numShards: 3, dtype: 'f32' });
  writeFileSync(join(dir, 'chat_template.jinja'), '{{ messages[0].content }}!');
  const m = loadModelDir(dir);
  assert.equal(m.config.architecture, 'llama');
  assert.equal(m.config.dtype, 'f32');
  assert.deepEqual(m.config.ropeScaling, { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 });
  assert.ok(m.weights.has('lm_head.weight'));
  const files = new Set(m.weights.names().map((n) => m.weights.info(n).file));
  assert.equal(files.size, 3);
  assert.equal(renderChat(m.chatTemplate!, [{ role: 'user', content: 'hey' }]), 'hey!');
});

test('--tokenizer: the tokenizer, its config and the chat template from another directory', async () => {
  const root = tempDir();
  const model = join(root, 'model');
  const tok = join(root, 'tok');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: model, seed: 3 });
  await makeTestModel({ shape: 'tiny-qwen3', outDir: tok, seed: 4 });
  writeFileSync(join(tok, 'chat_template.jinja'), '{% for m in messages %}<{{ m.content }}>{% endfor %}');
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) rmSync(join(model, f));
  loadError(model, 'tokenizer.json: file not found in');
  const m = loadModelDir(model, { tokenizer: tok });
  assert.equal(m.dir, model);
  assert.equal(m.chatTemplate, '{% for m in messages %}<{{ m.content }}>{% endfor %}');
  assert.equal(m.eosToken, '<|im_end|>');
  assert.equal(m.tokenizer.decode(m.tokenizer.encode('Hello there')), 'Hello there');
});

test('missing directory, config.json, tokenizer.json or weights: one error naming the file', async () => {
  const root = tempDir();
  loadError(join(root, 'nope'), `nope: model directory ${join(root, 'nope')} not found`);
  const dir = join(root, 'm');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir });
  renameSync(join(dir, 'config.json'), join(dir, 'config.bak'));
  loadError(dir, `config.json: file not found in ${dir}`);
  renameSync(join(dir, 'config.bak'), join(dir, 'config.json'));
  renameSync(join(dir, 'tokenizer.json'), join(dir, 'tokenizer.bak'));
  loadError(dir, `tokenizer.json: file not found in ${dir}`);
  renameSync(join(dir, 'tokenizer.bak'), join(dir, 'tokenizer.json'));
  rmSync(join(dir, 'model.safetensors'));
  loadError(dir, `model.safetensors: file not found in ${dir}`);
  writeFileSync(join(dir, 'config.json'), '{"architectures": ["GPT2LMHeadModel"]}');
  loadError(dir, 'config.json: field "architectures" names GPT2LMHeadModel');
});

test('generation_config: optional, scalar or list eos, sampling fields, bad values', () => {
  const dir = tempDir();
  assert.deepEqual(loadGenerationConfig(join(dir, 'generation_config.json')), { eosTokenIds: [], bosTokenId: null });
  assert.deepEqual(parseGenerationConfig({ eos_token_id: 7, bos_token_id: 1, top_k: 20, min_p: 0.05, repetition_penalty: 1.1 }, 'g'), {
    eosTokenIds: [7],
    bosTokenId: 1,
    topK: 20,
    minP: 0.05,
    repetitionPenalty: 1.1,
  });
  assert.deepEqual(parseGenerationConfig({ eos_token_id: [2, 3], temperature: 0.7, top_p: 0.8 }, 'g'), {
    eosTokenIds: [2, 3],
    bosTokenId: null,
    temperature: 0.7,
    topP: 0.8,
  });
  assert.throws(() => parseGenerationConfig({ eos_token_id: ['x'] }, '/m/generation_config.json'), /generation_config.json: field "eos_token_id"/);
  assert.throws(() => parseGenerationConfig({ temperature: 'hot' }, 'generation_config.json'), /field "temperature" must be a number/);
  writeFileSync(join(dir, 'generation_config.json'), '{');
  assert.throws(() => loadGenerationConfig(join(dir, 'generation_config.json')), /generation_config.json: cannot read/);
});
