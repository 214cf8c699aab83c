// tensorParallelRefusal: published shapes that split pass; a size that does not divide a field is refused with the
// field's name and both numbers.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseModelConfig } from '../../src/loader/config.js';
import type { ModelConfig } from '../../src/loader/types.js';
import { testModelShapes, FP8_QUANTIZATION_CONFIG } from '../../src/tools/test-model/shapes.js';
import { ParallelConfigError, tensorParallelRefusal } from '../../src/parallel/validate.js';

const shapes = testModelShapes();
const config = (shape: string, extra: Record<string, unknown> = {}): ModelConfig =>
  parseModelConfig({ ...shapes[shape], ...extra }, `${shape}/config.json`);

function refused(c: ModelConfig, tp: number, field: string, value: number, opts = {}): void {
  const err = tensorParallelRefusal(c, tp, opts);
  assert.ok(err instanceof ParallelConfigError, `tp ${tp} should be refused on ${field}`);
  assert.equal(err.field, field);
  assert.deepEqual([err.value, err.size], [value, tp]);
  assert.ok(err.message.includes(field) && err.message.includes(`(${value})`) && err.message.includes(String(tp)), err.message);
}

test('published shapes split over their usual sizes', () => {
  for (const tp of [1, 2, 4, 8]) {
    for (const shape of ['llama-3.1-70b', 'llama-3.1-8b', 'qwen3-8b', 'qwen3-0.6b', 'qwen3-30b-a3b', 'qwen3-next-80b-a3b']) {
      assert.equal(tensorParallelRefusal(config(shape), tp), null, `${shape} at tp ${tp}`);
    }
  }
  // more ranks than KV heads: each KV head replicated (qwen3-8b: 8 KV heads over 16 ranks; llama-3.1-70b over 64)
  assert.equal(tensorParallelRefusal(config('qwen3-8b'), 16), null);
  assert.equal(tensorParallelRefusal(config('llama-3.1-70b'), 64), null);
});

test('a size that does not divide a field is refused, naming the field and both numbers', () => {
  refused(config('llama-3.1-70b'), 3, 'num_attention_heads', 64);
  refused(config('qwen3-8b'), 64, 'num_attention_heads', 32);
  // 12 heads over 6 ranks but 4 KV heads: neither split nor replicated evenly
  refused(config('qwen3-8b', { num_attention_heads: 12, num_key_value_heads: 4 }), 6, 'num_key_value_heads', 4);
  // more KV heads than ranks, not a multiple
  refused(config('qwen3-8b', { num_attention_heads: 24, num_key_value_heads: 6 }), 4, 'num_key_value_heads', 6);
  refused(config('qwen3-8b', { intermediate_size: 12290 }), 4, 'intermediate_size', 12290);
  refused(config('qwen3-30b-a3b', { moe_intermediate_size: 100 }), 8, 'moe_intermediate_size', 100);
  refused(config('tiny-mixtral', { intermediate_size: 50 }), 4, 'intermediate_size', 50);
  refused(config('qwen3-next-80b-a3b', { shared_expert_intermediate_size: 500 }), 8, 'shared_expert_intermediate_size', 500);
  refused(config('qwen3-next-80b-a3b', { linear_num_key_heads: 12, linear_num_value_heads: 36 }), 8, 'linear_num_key_heads', 12);
  // vocab 100 pads to 128, which 6 ranks do not divide (heads and widths do)
  refused(config('tiny-qwen3', { num_attention_heads: 6, num_key_value_heads: 6, head_dim: 16, intermediate_size: 192,
    vocab_size: 100 }), 6, 'vocab_size', 100);
  const bad = tensorParallelRefusal(config('qwen3-8b'), 0);
  assert.ok(bad !== null && /not a positive integer/.test(bad.message));
});

test('expert parallel: whole experts instead of split widths; too few experts for the ranks is refused', () => {
  const odd = config('qwen3-30b-a3b', { moe_intermediate_size: 100 });
  assert.equal(tensorParallelRefusal(odd, 8, { expertParallel: true }), null, 'widths are not split');
  refused(config('tiny-qwen3-moe', { num_attention_heads: 16, num_key_value_heads: 16, head_dim: 4 }), 16, 'num_experts', 8,
    { expertParallel: true });
  refused(config('tiny-mixtral', { num_attention_heads: 8, num_key_value_heads: 8, head_dim: 8 }), 8, 'num_local_experts', 4,
    { expertParallel: true });
});

test('block FP8: every rank keeps whole 128-wide scale blocks', () => {
  const fp8 = { quantization_config: FP8_QUANTIZATION_CONFIG };
  for (const tp of [2, 4, 8]) assert.equal(tensorParallelRefusal(config('qwen3-8b', fp8), tp), null, `qwen3-8b FP8, tp ${tp}`);
  // Qwen3-30B-A3B-FP8 at 8 ranks: 768 / 8 = 96, as vLLM refuses it; whole experts a rank instead do split
  refused(config('qwen3-30b-a3b', fp8), 8, 'moe_intermediate_size', 768);
  assert.equal(tensorParallelRefusal(config('qwen3-30b-a3b', fp8), 8, { expertParallel: true }), null);
  refused(config('llama-3.1-8b', fp8), 32, 'intermediate_size', 14336);
});
