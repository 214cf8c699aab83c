// GGUF files (src/loader/gguf*.ts): llama.cpp's q/k permutation undone, the tokenizer from the metadata against the
// demo model's tokenizer.json, and bad files refused naming the file and the field.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { unpermuteQk } from '../../src/loader/gguf-weights.js';
import { loadModel, loadModelDir } from '../../src/loader/model-dir.js';
import { GGUF_QUANTIZATIONS, modelDirToGguf } from '../../src/tools/gguf-convert.js';
import { ggufQuantizationName } from '../../src/loader/gguf-config.js';
import { writeGguf, type GgufMetaValue } from '../../src/tools/gguf-write.js';
import { GgufFile } from '../../src/loader/gguf.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const root = mkdtempSync(join(tmpdir(), 'quire-gguf-'));
after(() => rmSync(root, { recursive: true, force: true }));
const demoGguf = join(root, 'demo.gguf');
modelDirToGguf(defaultModelDir(), demoGguf, 'q8_0');

test('unpermuteQk undoes convert_hf_to_gguf.py permute: a head of 4 rows stored r0 r2 r1 r3', () => {
  const stored = new Float32Array([0, 2, 1, 3, 10, 12, 11, 13]); // two heads of one column
  assert.deepEqual([...unpermuteQk(stored, 8, 1, 4)], [0, 1, 2, 3, 10, 11, 12, 13]);
});

test('the tokenizer built from GGUF metadata encodes and decodes as the demo model\'s tokenizer.json', async () => {
  const hf = loadModelDir(defaultModelDir());
  const gguf = await loadModel(demoGguf);
  for (const text of ['In the beginning God created the heaven and the earth.', '  spaces,\ttabs\nand 12345 numbers — ünïcödé ',
    '<|im_start|>user\nhello<|im_end|>\n', "it's THEY'RE we'll"]) {
    const ids = hf.tokenizer.encode(text);
    assert.deepEqual(gguf.tokenizer.encode(text), ids, text);
    assert.equal(gguf.tokenizer.decode(ids), hf.tokenizer.decode(ids));
    assert.equal(gguf.tokenizer.decode(ids, { skipSpecialTokens: true }), hf.tokenizer.decode(ids, { skipSpecialTokens: true }));
  }
  assert.equal(gguf.tokenizer.vocabSize, hf.tokenizer.vocabSize);
  assert.deepEqual([...gguf.tokenizer.specialTokenIds].sort(), [...hf.tokenizer.specialTokenIds].sort());
  assert.equal(gguf.chatTemplate, hf.chatTemplate);
  assert.equal(gguf.eosToken, '<|im_end|>');
  assert.deepEqual(gguf.generation.eosTokenIds, [2]);
  assert.equal(gguf.generation.bosTokenId, 0);
  assert.deepEqual(gguf.config, { ...hf.config, dtype: 'f32' });
});

test('a tokenizer smaller than vocab_size is padded to it with [PAD<id>] tokens, as llama.cpp requires', async () => {
  // llama.cpp's n_vocab is tokenizer.ggml.tokens' length, and token_embd.weight must have that many rows
  const dir = join(root, 'tiny-qwen3');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 1 });
  const hf = loadModelDir(dir);
  const file = join(root, 'tiny-qwen3.gguf');
  modelDirToGguf(dir, file, 'f32');
  const g = await GgufFile.open(file);
  const tokens = g.metadata.get('tokenizer.ggml.tokens') as string[];
  const types = g.metadata.get('tokenizer.ggml.token_type') as number[];
  const vocab = hf.config.vocabSize;
  const used = Object.keys((JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as { model: { vocab: object } }).model.vocab).length;
  assert.ok(used < vocab, `the shape's tokenizer (${used}) must be smaller than vocab_size (${vocab}) for this test`);
  assert.equal(tokens.length, vocab);
  assert.equal(types.length, vocab);
  assert.equal(g.tensors.get('token_embd.weight')!.shape[0], vocab);
  assert.equal(tokens[vocab - 1], `[PAD${vocab - 1}]`);
  assert.equal(types[vocab - 1], 5);
  const gguf = await loadModel(file);
  const text = 'hello world, 123';
  assert.deepEqual(gguf.tokenizer.encode(text), hf.tokenizer.encode(text));
});

test('a GGUF file is named by its general.file_type (as the converter writes it), else by its largest block type', async () => {
  const dir = join(root, 'tiny-qwen3');  // the padding test's model
  for (const q of GGUF_QUANTIZATIONS) {
    const file = join(root, `ft.${q}.gguf`);
    modelDirToGguf(dir, file, q);
    assert.equal(ggufQuantizationName(await GgufFile.open(file)), q);
  }
  assert.equal((await loadModel(join(root, 'ft.q4_k_m.gguf'))).ggufFileType, 'q4_k_m', 'the loaded model carries it (quire gate\'s path)');
  assert.equal(loadModelDir(dir).ggufFileType, undefined);
  const bare = join(root, 'bare.gguf');
  writeGguf(bare, [['general.architecture', { type: 'string', value: 'qwen3' }]], [
    { name: 'a', type: 'Q8_0', shape: [4, 64], data: new Uint8Array(4 * 2 * 34) },
    { name: 'b', type: 'Q4_0', shape: [2, 64], data: new Uint8Array(2 * 2 * 18) },
  ]);
  assert.equal(ggufQuantizationName(await GgufFile.open(bare)), 'q8_0');
});

test('--tokenizer beside a GGUF: its own tokenizer.json loads, another model\'s is refused naming the first differing id', async () => {
  const dir = join(root, 'tiny-qwen3');  // the padding test's model: 404 tokens, the GGUF padded to vocab_size
  const file = join(root, 'tok.q8_0.gguf');
  modelDirToGguf(dir, file, 'q8_0');
  const own = await loadModel(file, { tokenizer: dir });
  assert.equal(own.tokenizerDir, dir);
  await assert.rejects(loadModel(file, { tokenizer: defaultModelDir() }), (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, String(err));
    assert.match(err.message, /^tok\.q8_0\.gguf: --tokenizer .*: token id \d+ is .* not this model's tokenizer/);
    return true;
  });
});

test('a directory holding one GGUF file and no config.json loads that file', async () => {
  const dir = join(root, 'only');
  rmSync(dir, { recursive: true, force: true });
  (await import('node:fs')).mkdirSync(dir);
  writeFileSync(join(dir, 'm.gguf'), readFileSync(demoGguf));
  assert.equal((await loadModel(dir)).dir, join(dir, 'm.gguf'));
});

async function refused(bytes: Uint8Array, pattern: RegExp): Promise<void> {
  const file = join(root, `bad-${Math.random().toString(36).slice(2)}.gguf`);
  writeFileSync(file, bytes);
  await assert.rejects(loadModel(file), (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, String(err));
    assert.ok(err.message.startsWith(file.split('/').at(-1)!), err.message);
    assert.match(err.message, pattern);
    return true;
  });
}

const meta = (arch: string): [string, GgufMetaValue][] => [['general.architecture', { type: 'string', value: arch }],
  [`${arch}.block_count`, { type: 'u32', value: 1 }]];

test('bad files are refused naming the file and what is wrong', async () => {
  const good = readFileSync(demoGguf);
  await refused(new Uint8Array([...Buffer.from('GGUX'), ...good.subarray(4, 64)]), /bad magic/);
  await refused(good.subarray(0, 200), /header is truncated/);
  await refused(good.subarray(0, good.length - 100), /tensor output_norm\.weight's data ends .* truncated/);
  const unknownType = join(root, 'type.gguf');
  writeGguf(unknownType, meta('qwen3'), [{ name: 'token_embd.weight', type: 'F32', shape: [1, 4], data: new Uint8Array(16) }]);
  const bytes = readFileSync(unknownType);
  const at = bytes.indexOf(Buffer.from('token_embd.weight')) + 'token_embd.weight'.length + 4 + 16;
  bytes.writeUInt32LE(23, at); // IQ4_XS
  await refused(bytes, /tensor token_embd\.weight has GGML type 23, which is not supported/);
  const arch = join(root, 'arch.gguf');
  writeGguf(arch, meta('gemma2'), []);
  await refused(readFileSync(arch), /metadata "general\.architecture" is "gemma2", which is not supported \(supported: qwen3, qwen2, llama, qwen3moe, phi3\)/);
});

test('mixtures of experts llama.cpp writes otherwise than Quire runs them are refused naming the key', async () => {
  const file = (arch: string, extra: [string, GgufMetaValue][]): Uint8Array => {
    const f = join(root, `moe-${Math.random().toString(36).slice(2)}.gguf`);
    writeGguf(f, [...meta(arch), [`${arch}.embedding_length`, { type: 'u32', value: 8 }], ...extra], []);
    return readFileSync(f);
  };
  const u32 = (value: number): GgufMetaValue => ({ type: 'u32', value });
  await refused(file('qwen3moe', []), /metadata "qwen3moe\.expert_count" is missing: a qwen3moe model has experts/);
  await refused(file('qwen3moe', [['qwen3moe.expert_count', u32(8)], ['qwen3moe.expert_used_count', u32(9)]]),
    /metadata "qwen3moe\.expert_used_count" is 9: it must be 1 to expert_count \(8\)/);
  await refused(file('qwen3moe', [['qwen3moe.expert_count', u32(8)], ['qwen3moe.expert_used_count', u32(2)],
    ['qwen3moe.expert_shared_feed_forward_length', u32(16)]]), /"qwen3moe\.expert_shared_feed_forward_length" is set: shared experts/);
  await refused(file('qwen3', [['qwen3.expert_count', u32(8)], ['qwen3.expert_used_count', u32(2)]]),
    /metadata "qwen3\.expert_count" is set: a qwen3 model with experts is not supported/);
});

test('a Phi-3 GGUF with LongRoPE factors is refused naming the tensor', async () => {
  const f = join(root, 'longrope.gguf');
  const u32 = (value: number): GgufMetaValue => ({ type: 'u32', value });
  writeGguf(f, [...meta('phi3'), ['phi3.embedding_length', u32(8)], ['phi3.feed_forward_length', u32(16)],
    ['phi3.attention.head_count', u32(2)], ['phi3.context_length', u32(64)],
    ['phi3.attention.layer_norm_rms_epsilon', { type: 'f32', value: 1e-5 }]],
  [{ name: 'rope_factors_long.weight', type: 'F32', shape: [2], data: new Uint8Array(8) }]);
  await refused(readFileSync(f), /is phi3 with a rope_factors_long\.weight tensor \(LongRoPE\), which is not supported/);
});
