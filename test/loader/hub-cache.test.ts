// A repo id (`org/name`) loads from the local Hugging Face cache as vLLM finds it there: refs/main's snapshot, or the
// only one; anything else is an error that says where Quire looked and that it downloads nothing.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { hubCacheDir, resolveModelPath } from '../../src/loader/hub-cache.js';
import { loadModelDir } from '../../src/loader/model-dir.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { defaultServedName } from '../../src/cli/serve.js';
import { tempDir } from './helpers.js';

test('the hub cache folder follows HF_HUB_CACHE, then HF_HOME', () => {
  assert.equal(hubCacheDir({ HF_HUB_CACHE: '/c/hub', HF_HOME: '/h' }), '/c/hub');
  assert.equal(hubCacheDir({ HF_HOME: '/h' }), join('/h', 'hub'));
  assert.match(hubCacheDir({}), /\.cache\/huggingface\/hub$/);
});

test('a repo id resolves to refs/main\'s snapshot (or the only one) and loads; a directory stays itself', async () => {
  const cache = tempDir();
  const env = { HF_HUB_CACHE: cache };
  const repo = join(cache, 'models--acme--tiny-qwen3');
  await makeTestModel({ shape: 'tiny-qwen3', outDir: join(repo, 'snapshots', 'c0ffee'), seed: 1 });
  mkdirSync(join(repo, 'snapshots', 'older'), { recursive: true });
  mkdirSync(join(repo, 'refs'), { recursive: true });
  writeFileSync(join(repo, 'refs', 'main'), 'c0ffee\n');
  assert.equal(resolveModelPath('acme/tiny-qwen3', env), join(repo, 'snapshots', 'c0ffee'));
  assert.equal(resolveModelPath(cache, env), cache, 'an existing path');
  assert.equal(defaultServedName('acme/tiny-qwen3', join(repo, 'snapshots', 'c0ffee'), env), 'acme/tiny-qwen3', 'served as the repo id');
  assert.equal(defaultServedName(cache, cache, env), basename(cache), 'a directory: its name');
  const saved = process.env.HF_HUB_CACHE;
  process.env.HF_HUB_CACHE = cache;
  try {
    assert.equal(loadModelDir('acme/tiny-qwen3').config.architecture, 'qwen3');
  } finally {
    if (saved === undefined) delete process.env.HF_HUB_CACHE;
    else process.env.HF_HUB_CACHE = saved;
  }
  const single = join(cache, 'models--acme--one', 'snapshots', 'abc');
  mkdirSync(single, { recursive: true });
  assert.equal(resolveModelPath('acme/one', env), single, 'no refs/main: the only snapshot');
  mkdirSync(join(cache, 'models--acme--one', 'snapshots', 'def'));
  assert.throws(() => resolveModelPath('acme/one', env), /model acme\/one has 2 snapshots and no refs\/main/);
  assert.throws(() => resolveModelPath('acme/missing', env),
    /model acme\/missing is neither a directory nor in the Hugging Face cache \(looked in .*models--acme--missing\); Quire downloads nothing/);
});
