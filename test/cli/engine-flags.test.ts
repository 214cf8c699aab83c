// Engine flags reach EngineOptions: --profile turns on the CUDA profile tables, --batch-invariant the
// batch-invariant GEMMs (and its own gate path).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Command } from 'commander';
import { addEngineFlags, engineOptionsFromFlags } from '../../src/cli/engine-flags.js';
import { gatePathKey } from '../../src/cli/gate.js';

function parse(argv: string[]): Record<string, unknown> {
  const cmd = addEngineFlags(new Command('x')).exitOverride();
  cmd.parse(argv, { from: 'user' });
  return cmd.opts();
}

test('--profile sets EngineOptions.profile; off by default', () => {
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--profile'])).profile, true);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).profile, false);
});

test('--batch-invariant sets EngineOptions.batchInvariant and names its own gate path', () => {
  const on = engineOptionsFromFlags(parse(['--model', '/m', '--batch-invariant']));
  const off = engineOptionsFromFlags(parse(['--model', '/m']));
  assert.equal(on.batchInvariant, true);
  assert.equal(off.batchInvariant, false);
  assert.equal(gatePathKey('cuda', on), 'cuda-bf16-graphs-batch-invariant');
  assert.equal(gatePathKey('cuda', { ...on, enforceEager: true }), 'cuda-bf16-batch-invariant');
  assert.equal(gatePathKey('cuda', off), 'cuda-bf16-graphs');
  assert.equal(gatePathKey('cpu', on), 'cpu-f32');
});

test('--max-num-batched-tokens: unset leaves the per-device default (null); serve runs as the API server', async () => {
  const { serveEngineOptions } = await import('../../src/cli/serve.js');
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).maxNumBatchedTokens, null);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--max-num-batched-tokens', '4096'])).maxNumBatchedTokens, 4096);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).usageContext, 'llm-class');
  assert.equal(serveEngineOptions(parse(['--model', '/m'])).usageContext, 'api-server');
});
