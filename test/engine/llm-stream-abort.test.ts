// A consumer that stops reading LLM.stream early (quire chat's Ctrl-C) ends the request in the engine: nothing is
// left running and its pages are free, rather than generating on to max_tokens unread.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LLM } from '../../src/engine/llm.js';

test('breaking out of LLM.stream aborts the request and frees its pages', async () => {
  const llm = new LLM({ backend: 'cpu', cpu_threads: 1, max_model_len: 512 });
  try {
    await llm.ready();
    const free = (await llm.stats()).numFreeBlocks;
    let deltas = 0;
    for await (const d of llm.stream('In the beginning', { max_tokens: 400, temperature: 0, ignore_eos: true })) {
      assert.ok(d.text.length >= 0);
      if (++deltas === 2) break;
    }
    // the abort lands between steps: wait for the engine to settle, bounded
    let stats = await llm.stats();
    for (let i = 0; i < 100 && (stats.numRunning > 0 || stats.numFreeBlocks !== free); i++) {
      await new Promise((r) => setTimeout(r, 20));
      stats = await llm.stats();
    }
    assert.equal(stats.numRunning, 0, 'nothing left running');
    assert.equal(stats.numGenerationTokens < 100, true, `generated ${stats.numGenerationTokens} tokens, not on to 400`);
    assert.equal(stats.numFreeBlocks, free, 'every page back (or held by the prefix cache, counted free)');
  } finally {
    await llm.close();
  }
});
