// quire gate against a llama.cpp peer, end to end on a GGUF test model: `--dump-peer` tokenizes the gate prompts
// with the GGUF's own tokenizer and writes the peer's greedy tokens and top-20 logprobs; `--reference` then
// teacher-forces Quire along the peer's tokens and gates the KL over the peer's top-20. The peer here is a fake
// llama-server (v0.5.0's response shape) whose numbers are Quire's own engine on the same file, so the gate must
// pass; the same dump with one step's two leading logprobs swapped must fail.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { packageRoot } from '../../src/cli/default-model.js';
import { loadReferenceFile, referenceGate, referenceThresholdsKey, tokenPieces } from '../../src/cli/gate.js';
import { GgufFile } from '../../src/loader/gguf.js';
import { LLM } from '../../src/engine/llm.js';
import type { PeerDump, ReferenceThresholds } from '../../src/lab/index.js';
import { loadModel } from '../../src/loader/model-dir.js';
import { modelDirToGguf } from '../../src/tools/gguf-convert.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { llamaCppResponse, startFakeLlamaServer } from '../lab/fake-llama-server.js';

const run = promisify(execFile);
const main = join(packageRoot(), 'dist', 'src', 'cli', 'main.js');

test('gate --dump-peer then --reference: Quire against its own numbers passes, a swapped top-1 fails', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gate-peer-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: join(dir, 'm'), dtype: 'f32', seed: 0 });
  const gguf = join(dir, 'tq.f32.gguf');
  modelDirToGguf(join(dir, 'm'), gguf, 'f32');
  const llm = new LLM(gguf, { backend: 'cpu', cpuThreads: 1 });
  const server = await startFakeLlamaServer(async (body) => {
    const [c] = await llm.generate([body.prompt as number[]], {
      maxTokens: body.n_predict as number, temperature: 0, ignoreEos: true, logprobs: body.n_probs as number,
    });
    return llamaCppResponse(body, c!.logprobs!.map((l, k) => ({ id: c!.tokenIds[k]!, top: l.top.map((t) => ({ id: t.tokenId, logprob: t.logprob })) })));
  });
  try {
    const promptsFile = join(dir, 'prompts.json');
    const text = 'The capital of France is';
    writeFileSync(promptsFile, JSON.stringify({ maxTokens: 5, prompts: [{ id: 'capital', prompt: text }, { id: 'ids', prompt: [5, 6, 7, 8] }] }));
    const dumpFile = join(dir, 'peer.json');
    const d = await run(process.execPath, [main, 'gate', '--model', gguf, '--dump-peer', server.url, '--out', dumpFile, '--prompts', promptsFile]);
    assert.match(d.stdout, /wrote .*peer\.json/);
    const dump = JSON.parse(readFileSync(dumpFile, 'utf8')) as PeerDump;
    // the text prompt went out as the GGUF tokenizer's ids, as Quire's engine encodes it
    const want = (await loadModel(gguf)).tokenizer.encode(text, { addSpecialTokens: true });
    assert.deepEqual(dump.prompts[0]!.prompt, want);
    assert.deepEqual(server.bodies[0]!.prompt, want);
    assert.deepEqual(dump.prompts.map((p) => p.steps.length), [5, 5]);
    assert.equal(dump.prompts[1]!.steps[0]!.top.length, 20);

    // one token per embedding row, as llama.cpp requires: ids the tokenizer lacks are "[PAD<id>]", printed as nothing
    const meta = (await GgufFile.open(gguf)).metadata;
    const rows = JSON.parse(readFileSync(join(dir, 'm', 'config.json'), 'utf8')).vocab_size as number;
    const tokens = meta.get('tokenizer.ggml.tokens') as string[];
    assert.equal(tokens.length, rows);
    assert.ok(tokens.length > Object.keys(JSON.parse(readFileSync(join(dir, 'm', 'tokenizer.json'), 'utf8')).model.vocab).length + 3);
    assert.equal(tokens[rows - 1], `[PAD${rows - 1}]`);
    const piece = tokenPieces((await loadModel(gguf)).tokenizer);
    assert.deepEqual([...piece(rows - 1)], []);
    assert.deepEqual(Buffer.from(piece(want[1]!)).toString('utf8'), (await loadModel(gguf)).tokenizer.decode([want[1]!]));

    const thresholds = JSON.parse(readFileSync(join(packageRoot(), 'bench', 'gates', 'thresholds.json'), 'utf8')) as Record<string, ReferenceThresholds>;
    const key = referenceThresholdsKey(loadReferenceFile(dumpFile), 'cpu-f32');
    assert.equal(key, 'cpu-f32-llamacpp');
    const same = await referenceGate(llm, loadReferenceFile(dumpFile), key, thresholds);
    assert.equal(same.passed, true, same.detail);
    assert.match(same.detail, /top-1 100\.0%.* over 10 steps/);

    // a peer whose step 2 of the first prompt ranks its runner-up first
    const step = dump.prompts[0]!.steps[2]!;
    [step.top[0]!.logprob, step.top[1]!.logprob] = [step.top[1]!.logprob, step.top[0]!.logprob];
    const swappedFile = join(dir, 'swapped.json');
    writeFileSync(swappedFile, JSON.stringify(dump));
    const swapped = await referenceGate(llm, loadReferenceFile(swappedFile), key, thresholds);
    assert.equal(swapped.passed, false);
    assert.match(swapped.detail, /top-1 agreement 0\.9000 < 0\.95/);

    // the CLI path: the reference gate picks the -llamacpp thresholds entry for a llama.cpp dump
    const g = await run(process.execPath, [main, 'gate', '--model', gguf, '--backend', 'cpu', '--cpu-threads', '1', '--prompts', promptsFile,
      '--record', '--canonical', join(dir, 'canonical.json'), '--reference', dumpFile]);
    assert.match(g.stdout, /path cpu-f32-f32\n/, 'a GGUF file\'s path names its file type');
    assert.match(g.stdout, /entry cpu-f32-llamacpp/);
    assert.match(g.stdout, /\| reference cpu-f32-llamacpp \| PASS KL mean/);
  } finally {
    await server.close();
    await llm.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
