// The offline result shape shared with the transformers peer script
// (bench/offline-result.schema.json), the W1 prompt dump both engines replay,
// and the peer script's torch-free checks.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../../src/cli/default-model.js';
import { LLM } from '../../src/engine/llm.js';
import { loadW1, offlinePromptsFile, runOffline } from '../../src/lab/offline.js';
import { OFFLINE_RESULT_SCHEMA_PATH, schemaErrors, type JsonSchema } from '../../src/lab/result-schema.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';

const root = packageRoot();
const schema = JSON.parse(readFileSync(join(root, OFFLINE_RESULT_SCHEMA_PATH), 'utf8')) as JsonSchema;
const W1_PATH = join(root, 'bench', 'offline-256.json');
const PEER = join(root, 'tools', 'reference', 'peer_generate_batch.py');
const python = spawnSync('python3', ['--version']).status === 0 ? 'python3' : null;
const noPython = python ? false : 'no python3 on this machine';
const pyEnv = { ...process.env, PYTHONDONTWRITEBYTECODE: '1' };

describe('offline results and the peer script', () => {
  let dir = '';
  const vocabSize = 512;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'quire-peer-'));
    await makeTestModel({ shape: 'tiny-qwen3', outDir: join(dir, 'model'), dtype: 'f32', seed: 2 });
  });

  after(() => rmSync(dir, { recursive: true, force: true }));

  it('quire bench offline W1 results match the shared schema', async () => {
    const llm = new LLM(join(dir, 'model'), { backend: 'cpu', cpuThreads: 1, maxModelLen: 2048 });
    try {
      const reqs = loadW1(W1_PATH, (await llm.ready()).config.vocabSize, 2, 3);
      const r = await runOffline(llm, 'w1', reqs);
      const printed = JSON.parse(JSON.stringify(r)) as Record<string, unknown>;
      assert.deepEqual(schemaErrors(printed, schema), []);
      assert.equal(printed['engine'], 'quire');
      assert.equal(printed['numOutputTokens'], 6);
      assert.equal(typeof printed['ttftP50Ms'], 'number');
      const { wallS: _wallS, ...noWall } = printed;
      assert.deepEqual(schemaErrors({ ...noWall, tokensPerS: 1 }, schema),
        ['$: missing required key "wallS"', '$: unexpected key "tokensPerS"']);
      assert.deepEqual(schemaErrors({ ...printed, numRequests: 2.5, wallS: -1 }, schema),
        ['$.numRequests: expected integer, got number', '$.wallS: -1 is below the minimum 0']);
    } finally {
      await llm.close();
    }
  });

  it('--dump-prompts writes the W1 token ids quire runs, folded into the model vocabulary', () => {
    const file = join(dir, 'w1-prompts.json');
    execFileSync(process.execPath, [join(root, 'dist', 'src', 'cli', 'main.js'), 'bench', 'offline', '--workload', 'w1',
      '--model', join(dir, 'model'), '--num-requests', '5', '--output-len', '16', '--dump-prompts', file], { stdio: 'pipe' });
    const dumped = JSON.parse(readFileSync(file, 'utf8')) as ReturnType<typeof offlinePromptsFile>;
    assert.deepEqual(dumped, offlinePromptsFile('w1', vocabSize, loadW1(W1_PATH, vocabSize, 5, 16)));
    assert.equal(dumped.requests.length, 5);
    assert.ok(dumped.requests.every((r) => r.max_tokens === 16 && r.prompt_token_ids.every((t) => t >= 0 && t < vocabSize)));
    const raw = JSON.parse(readFileSync(W1_PATH, 'utf8')) as { requests: { prompt_token_ids: number[] }[] };
    assert.ok(raw.requests[0]!.prompt_token_ids.some((t) => t >= vocabSize), 'the raw file needs folding at this vocabulary');
    // the same model named by repo id, from a Hugging Face cache
    const cache = join(dir, 'hub');
    cpSync(join(dir, 'model'), join(cache, 'models--acme--tiny', 'snapshots', 'abc'), { recursive: true });
    const byId = join(dir, 'w1-prompts-id.json');
    execFileSync(process.execPath, [join(root, 'dist', 'src', 'cli', 'main.js'), 'bench', 'offline', '--workload', 'w1',
      '--model', 'acme/tiny', '--num-requests', '5', '--output-len', '16', '--dump-prompts', byId],
    { stdio: 'pipe', env: { ...process.env, HF_HUB_CACHE: cache } });
    assert.deepEqual(JSON.parse(readFileSync(byId, 'utf8')), dumped);
  });

  it('the peer script loads the same prompts from the dump and from the raw file', { skip: noPython }, () => {
    const file = join(dir, 'w1-prompts.json');
    const expected = loadW1(W1_PATH, vocabSize, 5, 16);
    const selfCheck = (args: string[]) => JSON.parse(execFileSync(python!, [PEER, '--self-check', ...args], { env: pyEnv, encoding: 'utf8' })) as
      { numRequests: number; numPromptTokens: number; numMaxTokens: number; firstPrompt: number[]; resultKeys: string[] };
    for (const args of [['--prompts', file], ['--vocab-size', String(vocabSize), '--num-requests', '5', '--output-len', '16']]) {
      const got = selfCheck(args);
      assert.equal(got.numRequests, 5);
      assert.equal(got.numPromptTokens, expected.reduce((a, r) => a + r.promptTokenIds.length, 0));
      assert.equal(got.numMaxTokens, 5 * 16);
      assert.deepEqual(got.firstPrompt, expected[0]!.promptTokenIds);
      assert.deepEqual(got.resultKeys, [...schema.required!, 'provenance'].sort());
    }
  });

  it('the peer script\'s unit tests pass', { skip: noPython }, () => {
    const r = spawnSync(python!, ['-m', 'unittest', 'discover', '-s', join(root, 'tools', 'reference'), '-p', 'test_*.py'],
      { env: pyEnv, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /Ran \d+ tests[\s\S]*OK/);
  });
});
