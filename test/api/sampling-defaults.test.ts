// Default sampling parameters from the model's generation_config.json (vLLM's --generation-config auto), none
// (vllm), a folder's, with --override-generation-config on top; a request's own fields win.

import { after, before, describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseGenerationOverride, samplingDefaults } from '../../src/api/sampling-defaults.js';
import { MODEL, postJson, startTestServer, type TestServer } from './helpers/start.js';

test('auto reads the model\'s generation_config.json sampling fields, vllm none, a folder its own; overrides on top', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-gencfg-'));
  try {
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: 2, do_sample: true, temperature: 0.6,
      top_p: 0.95, top_k: 20, max_new_tokens: 99 }));
    const other = join(dir, 'other');
    mkdirSync(other);
    writeFileSync(join(other, 'generation_config.json'), JSON.stringify({ repetition_penalty: 1.1, min_p: 0.05 }));
    assert.deepEqual(samplingDefaults('auto', dir), { temperature: 0.6, topP: 0.95, topK: 20 });
    assert.deepEqual(samplingDefaults('vllm', dir), {});
    assert.deepEqual(samplingDefaults(other, dir), { repetitionPenalty: 1.1, minP: 0.05 });
    assert.deepEqual(samplingDefaults('auto', dir, parseGenerationOverride('{"temperature": 0.2, "min_p": 0.1}')),
      { temperature: 0.2, topP: 0.95, topK: 20, minP: 0.1 });
    const bare = join(dir, 'bare');
    mkdirSync(bare);
    assert.deepEqual(samplingDefaults('auto', bare), {}, 'no generation_config.json: no defaults');
    assert.throws(() => samplingDefaults(join(dir, 'missing'), dir), /--generation-config .*missing: no generation_config.json there/);
    assert.throws(() => parseGenerationOverride('temperature=1'), /takes a JSON object/);
    assert.throws(() => parseGenerationOverride('{"max_tokens": 5}'), /"max_tokens" is not one of temperature, top_p/);
    assert.throws(() => parseGenerationOverride('{"top_p": "high"}'), /"top_p" must be a number/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

describe('a server with sampling defaults', () => {
  let s: TestServer;
  before(async () => { s = await startTestServer({ samplingDefaults: { temperature: 0.25, topK: 5, topP: 0.5 } }); });
  after(() => s.close());
  const sampling = () => s.engine.submitted.at(-1)!.sampling;

  it('fills the fields a request leaves out or sends as null, on completions, chat and responses', async () => {
    await postJson(`${s.url}/v1/completions`, { model: MODEL, prompt: 'x', max_tokens: 1 });
    assert.deepEqual([sampling().temperature, sampling().topK, sampling().topP], [0.25, 5, 0.5]);
    await postJson(`${s.url}/v1/chat/completions`, { model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 1,
      temperature: null, top_p: 1 });
    assert.deepEqual([sampling().temperature, sampling().topK, sampling().topP], [0.25, 5, 1]);
    const r = await postJson(`${s.url}/v1/responses`, { model: MODEL, input: 'x', max_output_tokens: 1, temperature: 0 });
    assert.deepEqual([sampling().temperature, sampling().topK], [0, 5]);
    assert.equal(r.json.temperature, 0);
    assert.equal(r.json.top_p, 0.5, 'the response echoes the parameters in effect');
  });
});

test('a server without defaults keeps the OpenAI ones', async () => {
  const s = await startTestServer();
  try {
    await postJson(`${s.url}/v1/completions`, { model: MODEL, prompt: 'x', max_tokens: 1 });
    const p = s.engine.submitted.at(-1)!.sampling;
    assert.deepEqual([p.temperature, p.topK, p.topP], [1, -1, 1]);
  } finally {
    await s.close();
  }
});
