// --kv-cache-dtype fp8 on the CPU backend: K and V are rounded to FP8 E4M3 as they are stored (what the GPU's FP8
// cache holds), so prompt logprobs move a little from the f32 cache's, and the same prompts give the same tokens
// alone or batched.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngineCore } from '../../src/engine/create-engine.js';
import { engineOptions, type EngineOptions } from '../../src/engine/options.js';
import type { EngineOutput } from '../../src/engine/types.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { writeKv } from '../../src/backend/cpu/attention.js';
import { roundE4m3 } from '../../src/loader/fp8.js';
import { batchOf } from '../backend/helpers.js';

let dir = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'quire-fp8kv-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed: 4 });
});
after(() => rmSync(dir, { recursive: true, force: true }));

const P = [[5, 9, 11, 40, 3, 77, 12, 8, 150, 9, 31, 2, 17, 19, 23, 4, 8], [300, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]];

async function run(opts: Partial<EngineOptions>, prompts: number[][]): Promise<EngineOutput[][]> {
  const core = await createEngineCore(engineOptions({ model: dir, backend: 'cpu', cpuThreads: 1, ...opts }));
  try {
    prompts.forEach((prompt, i) => core.addRequest({ requestId: `r${i}`, promptTokenIds: prompt, priority: 0,
      cacheSalt: null, arrivalTime: 0,
      sampling: defaultSamplingParams({ temperature: 0, ignoreEos: true, maxTokens: 8, promptLogprobs: 0 }) }));
    const out: EngineOutput[] = [];
    while (core.hasWork()) out.push(...core.step());
    return prompts.map((_, i) => out.filter((o) => o.requestId === `r${i}`));
  } finally {
    core.dispose();
  }
}

test('the cache stores e4m3 values: writeKv rounds each k and v it writes', () => {
  const [H, KV, D] = [2, 1, 4];
  const qkv = Float32Array.from({ length: (H + 2 * KV) * D }, (_, i) => (i - 7) * 0.37 + 0.011);
  const layer = { k: new Float32Array(2 * 16 * KV * D), v: new Float32Array(2 * 16 * KV * D) };
  const batch = batchOf([{ ids: [1], start: 3, pages: [1] }], 16);
  writeKv(qkv, layer, batch, { numHeads: H, numKvHeads: KV, headDim: D, blockSize: 16 }, true);
  const slot = batch.slotMapping[0]!;
  const k = Array.from(layer.k.subarray(slot * D, slot * D + D));
  const v = Array.from(layer.v.subarray(slot * D, slot * D + D));
  assert.deepEqual(k, Array.from(qkv.subarray(H * D, H * D + D), (x) => Math.fround(roundE4m3(x))));
  assert.deepEqual(v, Array.from(qkv.subarray((H + 1) * D, (H + 2) * D), (x) => Math.fround(roundE4m3(x))));
  assert.notDeepEqual(k, Array.from(qkv.subarray(H * D, H * D + D)), 'the values moved');
});

test('FP8 cache: prompt logprobs near the f32 cache\'s, and the same tokens alone or batched', async () => {
  const exact = await run({}, P);
  const fp8 = await run({ kvCacheDtype: 'fp8_e4m3' }, P);
  let worst = 0;
  let moved = 0;
  exact.forEach((outs, i) => {
    const a = outs[0]!.promptLogprobs!;
    const b = fp8[i]![0]!.promptLogprobs!;
    for (let p = 1; p < a.length; p++) {
      const d = Math.abs(a[p]!.logprob - b[p]!.logprob);
      worst = Math.max(worst, d);
      if (d > 0) moved++;
    }
  });
  assert.ok(moved > 0, 'the rounding shows in the logprobs');
  assert.ok(worst < 0.1, `prompt logprobs moved by up to ${worst}`);
  const tokens = (o: EngineOutput[][]) => o.map((r) => r.flatMap((x) => x.newTokenIds));
  const alone = [...(await run({ kvCacheDtype: 'fp8_e4m3' }, [P[0]!])), ...(await run({ kvCacheDtype: 'fp8_e4m3' }, [P[1]!]))];
  assert.deepEqual(tokens(fp8), tokens(alone));
});
