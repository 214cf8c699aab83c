// Split GGUF files (llama.cpp's gguf-split: <base>-0000k-of-0000n.gguf, src/loader/gguf.ts GgufFile.open): any shard
// or their directory opens the whole model, the same config and the same bytes of every tensor as the unsplit file
// and the same greedy tokens; shards that do not add up are refused naming the shard and what is wrong.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { LLM } from '../../src/engine/llm.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { ModelLoadError } from '../../src/loader/errors.js';
import { GgufFile, ggufShardName } from '../../src/loader/gguf.js';
import { loadModel } from '../../src/loader/model-dir.js';
import { modelDirToGguf, modelDirToGgufShards } from '../../src/tools/gguf-convert.js';
import { writeGguf } from '../../src/tools/gguf-write.js';

const root = mkdtempSync(join(tmpdir(), 'quire-gguf-split-'));
after(() => rmSync(root, { recursive: true, force: true }));
const whole = join(root, 'demo.gguf');
modelDirToGguf(defaultModelDir(), whole, 'q8_0');
mkdirSync(join(root, 'split'));
const base = join(root, 'split', 'demo');
const shards = modelDirToGgufShards(defaultModelDir(), base, 'q8_0', 3);

async function greedy(path: string): Promise<number[][]> {
  const llm = new LLM(path, { backend: 'cpu', maxModelLen: 128 });
  try {
    return (await llm.generate(['And God said', 'In the beginning'], { maxTokens: 8, temperature: 0, ignoreEos: true }))
      .map((c) => c.tokenIds);
  } finally {
    await llm.close();
  }
}

test('any shard, or the directory of shards, opens the whole model: the unsplit file\'s config, tensors and tokens', async () => {
  assert.deepEqual(shards.map((f) => basename(f)), ['demo-00001-of-00003.gguf', 'demo-00002-of-00003.gguf', 'demo-00003-of-00003.gguf']);
  const one = await GgufFile.open(whole);
  const want = (await loadModel(whole)).config;
  for (const path of [shards[0]!, shards[1]!, join(root, 'split')]) {
    assert.deepEqual((await loadModel(path)).config, want, path);
  }
  const split = await GgufFile.open(shards[2]!);
  assert.deepEqual([...split.tensors.keys()].sort(), [...one.tensors.keys()].sort());
  assert.ok(new Set([...split.tensors.values()].map((t) => t.file)).size === 3, 'tensors in every shard');
  for (const name of one.tensors.keys()) assert.deepEqual(split.readRaw(name), one.readRaw(name), name);
  assert.deepEqual(await greedy(shards[0]!), await greedy(whole));
});

async function refused(path: string, pattern: RegExp): Promise<void> {
  await assert.rejects(loadModel(path), (err: unknown) => {
    assert.ok(err instanceof ModelLoadError, String(err));
    assert.match(err.message, pattern);
    return true;
  });
}

test('shards that do not make one model are refused naming the shard', async () => {
  const dir = join(root, 'bad');
  const copy = (k: number, to = k): string => {
    const f = ggufShardName(join(dir, 'demo'), to, 3);
    copyFileSync(shards[k - 1]!, f);
    return f;
  };
  mkdirSync(dir);
  const first = copy(1);
  copy(3);
  await refused(first, /shard demo-00002-of-00003\.gguf of 3 is missing/);
  copy(3, 2);  // shard 3's bytes under shard 2's name
  await refused(first, /demo-00002-of-00003\.gguf: metadata "split\.no" 2 and "split\.count" 3 are not shard 2 of 3/);
  copy(2);
  copy(1, 3);  // shard 1 again as shard 3: its split.no says 0
  await refused(first, /demo-00003-of-00003\.gguf: metadata "split\.no" 0/);
  copy(3);
  const renamed = join(dir, 'other.gguf');
  copyFileSync(first, renamed);
  await refused(renamed, /"split\.count" is 3, but the file is not named <base>-0000k-of-00003\.gguf/);
  rmSync(renamed);
  // a tensor in two shards: shard 2's bytes with one of shard 1's tensor names written over one of its own
  const all = [...(await GgufFile.open(first)).tensors.values()];
  const shard2 = ggufShardName(join(dir, 'demo'), 2, 3);
  const pair = all.filter((t) => t.file === shard2).map((t2) => [all.find((t1) => t1.file === first && t1.name.length === t2.name.length)?.name,
    t2.name] as const).find(([n1]) => n1 !== undefined);
  assert.ok(pair !== undefined, 'a name of shard 1 as long as one of shard 2');
  const [name1, name2] = pair as readonly [string, string];
  const bytes = readFileSync(shard2);
  bytes.set(Buffer.from(name1), bytes.indexOf(Buffer.from(name2)));
  writeFileSync(shard2, bytes);
  await refused(first, new RegExp(`tensor ${name1.replace(/\./g, '\\.')} is also in demo-00001-of-00003\\.gguf`));
  // shard 2 written as a shard of nothing: the tensors do not add up to split.tensors.count
  writeGguf(shard2, [['split.no', { type: 'u16', value: 1 }], ['split.count', { type: 'u16', value: 3 }],
    ['split.tensors.count', { type: 'i32', value: all.length }]], []);
  await refused(first, new RegExp(`the 3 shards hold \\d+ tensors, but "split\\.tensors\\.count" says ${all.length}`));
});

test('a directory of GGUF files that are not one split model is refused naming them', async () => {
  const dir = join(root, 'two');
  mkdirSync(dir);
  copyFileSync(whole, join(dir, 'a.gguf'));
  copyFileSync(whole, join(dir, 'b.gguf'));
  await refused(dir, /holds 2 GGUF files \(a\.gguf, b\.gguf\) .* not the shards of one split model/);
});
