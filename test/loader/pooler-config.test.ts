// The pooling runner's pooler: sentence-transformers files, vLLM's defaults, --pooler-config over both.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { modelPoolerConfig, resolvePoolerConfig } from '../../src/loader/pooler-config.js';

function stDir(pooling: Record<string, boolean> | null, normalize: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), 'quire-pooler-'));
  const modules = [{ idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' }];
  if (pooling) {
    modules.push({ idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' });
    mkdirSync(join(dir, '1_Pooling'));
    writeFileSync(join(dir, '1_Pooling', 'config.json'), JSON.stringify({ word_embedding_dimension: 1024, ...pooling }));
  }
  if (normalize) modules.push({ idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' });
  writeFileSync(join(dir, 'modules.json'), JSON.stringify(modules));
  return dir;
}

test('without sentence-transformers files: the last token, normalized (vLLM\'s decoder default)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-pooler-'));
  try {
    assert.deepEqual(resolvePoolerConfig(dir, {}, null), { poolingType: 'LAST', normalize: true, matryoshkaDimensions: [] });
    assert.equal(resolvePoolerConfig(dir, {}, { normalize: false }).normalize, false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('Qwen3-Embedding\'s files: last token and Normalize; without Normalize, not normalized', () => {
  const dirs = [stDir({ pooling_mode_lasttoken: true, pooling_mode_mean_tokens: false }, true),
    stDir({ pooling_mode_lasttoken: true }, false)];
  try {
    assert.equal(resolvePoolerConfig(dirs[0]!, {}, null).normalize, true);
    assert.equal(resolvePoolerConfig(dirs[1]!, {}, null).normalize, false);
    assert.equal(resolvePoolerConfig(dirs[1]!, {}, { normalize: true }).normalize, true, '--pooler-config wins');
  } finally {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});

test('another pooling is refused, naming the file and field or the flag', () => {
  const dir = stDir({ pooling_mode_mean_tokens: true }, true);
  try {
    assert.throws(() => resolvePoolerConfig(dir, {}, null), /1_Pooling\/config\.json \(pooling_mode_mean_tokens\): MEAN pooling is not supported/);
    assert.equal(resolvePoolerConfig(dir, {}, { pooling_type: 'last' }).poolingType, 'LAST', 'the flag may ask for LAST');
    assert.throws(() => resolvePoolerConfig(dir, {}, { pooling_type: 'CLS' }), /--pooler-config pooling_type: CLS pooling is not supported/);
    assert.throws(() => resolvePoolerConfig(dir, {}, { pooling_type: 'SUM' }), /pooling_type must be one of/);
    assert.throws(() => resolvePoolerConfig(dir, {}, { softmax: true }), /field "softmax" is not supported/);
    assert.throws(() => resolvePoolerConfig(dir, {}, { pooling_type: 'LAST', normalize: 'yes' }), /normalize must be true or false/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('Matryoshka dimensions from config.json', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-pooler-'));
  try {
    assert.equal(resolvePoolerConfig(dir, { is_matryoshka: true }, null).matryoshkaDimensions, null);
    assert.deepEqual(resolvePoolerConfig(dir, { matryoshka_dimensions: [64, 128] }, null).matryoshkaDimensions, [64, 128]);
    assert.throws(() => resolvePoolerConfig(dir, { matryoshka_dimensions: [0] }, null), /config\.json: matryoshka_dimensions/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('modelPoolerConfig reads config.json, with --hf-overrides\' fields over it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-pooler-'));
  try {
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ matryoshka_dimensions: [32, 64] }));
    assert.deepEqual(modelPoolerConfig(dir, null).matryoshkaDimensions, [32, 64]);
    assert.equal(modelPoolerConfig(dir, null, { matryoshka_dimensions: null, is_matryoshka: true }).matryoshkaDimensions, null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
