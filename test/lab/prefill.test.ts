import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { buildPrefill, prefillFlops } from '../../src/lab/offline.js';
import { tinyConfig } from '../../src/model/random-weights.js';
import { packageRoot } from '../../src/cli/default-model.js';

test('prefillFlops: 2 per projection weight per token, the lm head once, causal attention pairs', () => {
  const c = tinyConfig('qwen3', { hiddenSize: 64, intermediateSize: 96, numHeads: 4, numKvHeads: 2, headDim: 16,
    vocabSize: 100, numLayers: 3 });
  // per layer: q 64x64, k 64x32, v 64x32, o 64x64, gate/up 2x 64x96, down 96x64
  const perToken = 3 * 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 96);
  const attention = (L: number) => 3 * 4 * 4 * 16 * (L * (L + 1)) / 2;
  assert.equal(prefillFlops(c, [10, 1]), perToken * 11 + 2 * 2 * 64 * 100 + attention(10) + attention(1));
  // a mixture of experts counts its active weights: the router and the top-k experts, on its sparse layers only
  const moe = { ...c, moe: { numExperts: 8, topK: 2, expertIntermediateSize: 32, renormalize: true,
    sharedExpertIntermediateSize: null, sparseLayers: [true, false, true] } };
  const activeFfn = 8 * 64 + 2 * 3 * 64 * 32;
  assert.equal(prefillFlops(moe, [10]) - prefillFlops(c, [10]), 2 * 10 * 2 * (activeFfn - 3 * 64 * 96));
  // a shared expert (Qwen3-Next, Qwen3.5-MoE): its SwiGLU MLP and its gate, every token of a sparse layer
  const shared = { ...moe, moe: { ...moe.moe, sharedExpertIntermediateSize: 48 } };
  assert.equal(prefillFlops(shared, [10]) - prefillFlops(moe, [10]), 2 * 10 * 2 * (3 * 64 * 48 + 64));
  const reqs = buildPrefill(3, 7, 50);
  assert.deepEqual(reqs.map((r) => [r.promptTokenIds.length, r.maxTokens]), [[7, 1], [7, 1], [7, 1]]);
  assert.notDeepEqual(reqs[0]!.promptTokenIds, reqs[1]!.promptTokenIds, 'no shared prefix');
});

test('quire bench offline --workload prefill prints a table with prompt tokens/s and model TFLOP/s; --json - the raw result', () => {
  const out = execFileSync(process.execPath, [join(packageRoot(), 'dist', 'src', 'cli', 'main.js'), 'bench', 'offline',
    '--workload', 'prefill', '--num-requests', '3', '--prompt-len', '40', '--backend', 'cpu', '--cpu-threads', '1',
    '--force', '--json', '-'], { encoding: 'utf8' });
  assert.match(out, /^run +requests +prompt tok/m, 'a table first');
  assert.match(out, /^prefill +3 +120 /m);
  assert.match(out, /^prefill: [\d,.]+ prompt tokens\/s, [\d.]+ TFLOP\/s/m);
  const json = JSON.parse(out.slice(out.indexOf('\n{'))) as { results: (Record<string, number> & { stats: { numPromptTokens: number } })[] };
  const r = json.results[0]!;
  assert.equal(r.numRequests, 3);
  assert.equal(r.numPromptTokens, 120);
  assert.equal(r.numOutputTokens, 3);
  assert.ok(r.promptTokensPerS! > 0 && r.modelTflopPerS! > 0);
  assert.ok(Math.abs(r.promptTokensPerS! - 120 / r.wallS!) < 1e-6 * r.promptTokensPerS!);
  assert.equal(r.shareOfGemmPeak, undefined, 'no GEMM peak on the CPU');
  assert.equal(r.stats.numPromptTokens, 240, 'warm-up and timed prompts all computed: no prefix-cache hit between them');
});
