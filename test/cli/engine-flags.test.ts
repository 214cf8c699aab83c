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
  // an FP8 KV cache is a path of its own (lossy: its transcripts are not the bf16 ones)
  const fp8 = engineOptionsFromFlags(parse(['--model', '/m', '--kv-cache-dtype', 'fp8']));
  assert.equal(gatePathKey('cuda', fp8), 'cuda-bf16-fp8kv-graphs');
  assert.equal(gatePathKey('cpu', fp8), 'cpu-f32-fp8kv');
  const fp8w = engineOptionsFromFlags(parse(['--model', '/m', '-q', 'fp8']));
  assert.equal(fp8w.quantization, 'fp8');
  assert.equal(gatePathKey('cuda', fp8w), 'cuda-bf16-fp8w-graphs');
  assert.equal(gatePathKey('cpu', { ...fp8w, kvCacheDtype: 'fp8_e4m3' }), 'cpu-f32-fp8w-fp8kv');
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).quantization, null);
  // a GGUF file's quantization names a path of its own
  assert.equal(gatePathKey('cuda', off, 'q4_k_m'), 'cuda-bf16-q4_k_m-graphs');
  assert.equal(gatePathKey('cpu', fp8, 'q8_0'), 'cpu-f32-q8_0-fp8kv');
});

test('--mamba-ssm-cache-dtype: auto and float32 keep f32 DeltaNet states, bfloat16 rounds them (a gate path of its '
  + 'own); float16 is refused naming the flag', () => {
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).mambaSsmCacheDtype, 'f32');
  for (const v of ['auto', 'float32']) {
    const o = engineOptionsFromFlags(parse(['--model', '/m', '--mamba-ssm-cache-dtype', v]));
    assert.equal(o.mambaSsmCacheDtype, 'f32');
  }
  const bf16 = engineOptionsFromFlags(parse(['--model', '/m', '--mamba-ssm-cache-dtype', 'bfloat16']));
  assert.equal(bf16.mambaSsmCacheDtype, 'bf16');
  assert.equal(gatePathKey('cuda', bf16), 'cuda-bf16-bf16ssm-graphs');
  assert.equal(gatePathKey('cpu', bf16), 'cpu-f32-bf16ssm');
  assert.throws(() => parse(['--model', '/m', '--mamba-ssm-cache-dtype', 'float16']),
    /--mamba-ssm-cache-dtype float16: not supported \(accepted: auto, float32, bfloat16\)/);
});

test('--grammar-hosts sets EngineOptions.grammarHosts (default 4, at least 1)', () => {
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).grammarHosts, 4);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--grammar-hosts', '2'])).grammarHosts, 2);
  assert.throws(() => parse(['--model', '/m', '--grammar-hosts', '0']), /at least 1|positive integer/);
});

test('--max-num-batched-tokens: unset leaves the per-device default (null); serve runs as the API server', async () => {
  const { serveEngineOptions } = await import('../../src/cli/serve.js');
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).maxNumBatchedTokens, null);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--max-num-batched-tokens', '4096'])).maxNumBatchedTokens, 4096);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).usageContext, 'llm-class');
  assert.equal(serveEngineOptions(parse(['--model', '/m'])).usageContext, 'api-server');
});

test('vLLM command lines run: -tp / -pp, --dtype auto|bfloat16, --kv-cache-dtype auto, --trust-remote-code', async () => {
  const { vllmShortFlags } = await import('../../src/cli/engine-flags.js');
  const argv = vllmShortFlags(['--model', '/m', '-tp', '1', '-pp', '1', '--dtype', 'bfloat16', '--kv-cache-dtype', 'auto',
    '--trust-remote-code', '--enable-chunked-prefill']);
  assert.deepEqual(argv.slice(2, 6), ['--tensor-parallel-size', '1', '--pipeline-parallel-size', '1']);
  const o = engineOptionsFromFlags(parse(argv));
  assert.equal(o.enableChunkedPrefill, true);
  for (const [flags, message] of [
    [['-tp', '0'], /--tensor-parallel-size/],
    [['-pp', '0'], /--pipeline-parallel-size/],
    [['--dtype', 'half'], /--dtype half: Quire computes in bfloat16 on CUDA and float32 on the CPU backend \(accepted: auto, bfloat16, bf16\)/],
    [['--kv-cache-dtype', 'fp8_e5m2'], /--kv-cache-dtype fp8_e5m2: not supported \(accepted: auto, bfloat16, fp8, fp8_e4m3; FP8 is E4M3 only\)/],
    [['--quantization', 'awq'], /--quantization awq: not supported \(accepted: fp8/],
  ] as const) {
    assert.throws(() => parse(vllmShortFlags(['--model', '/m', ...flags])), message);
  }
  assert.equal(o.kvCacheDtype, 'auto');
  assert.equal(engineOptionsFromFlags(parse(vllmShortFlags(['--model', '/m', '-tp', '2']))).tensorParallelSize, 2);
  assert.equal(o.pipelineParallelSize, 1);
  assert.equal(engineOptionsFromFlags(parse(vllmShortFlags(['--model', '/m', '-pp', '3']))).pipelineParallelSize, 3);
  assert.equal(o.disableCustomAllReduce, false);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--disable-custom-all-reduce'])).disableCustomAllReduce, true);
  assert.equal(o.enableExpertParallel, false);
  assert.equal(o.expertPlacementStrategy, 'linear');
  const ep = engineOptionsFromFlags(parse(['--model', '/m', '--tensor-parallel-size', '2', '--enable-expert-parallel', '--expert-placement-strategy', 'round_robin']));
  assert.deepEqual([ep.enableExpertParallel, ep.expertPlacementStrategy], [true, 'round_robin']);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--no-enable-expert-parallel'])).enableExpertParallel, false);
  assert.throws(() => parse(['--model', '/m', '--expert-placement-strategy', 'random']), /expert-placement-strategy/);
  for (const name of ['fp8', 'fp8_e4m3']) {
    assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--kv-cache-dtype', name])).kvCacheDtype, 'fp8_e4m3');
  }
});

test('--no-enable-chunked-prefill and --long-prefill-token-threshold reach the scheduler\'s options', () => {
  const o = engineOptionsFromFlags(parse(['--model', '/m', '--no-enable-chunked-prefill', '--long-prefill-token-threshold', '64']));
  assert.equal(o.enableChunkedPrefill, false);
  assert.equal(o.longPrefillTokenThreshold, 64);
  const d = engineOptionsFromFlags(parse(['--model', '/m']));
  assert.equal(d.enableChunkedPrefill, true);
  assert.equal(d.longPrefillTokenThreshold, 0);
});

test('--hf-overrides takes a JSON object; anything else is refused naming the flag', () => {
  const o = engineOptionsFromFlags(parse(['--model', '/m', '--hf-overrides', '{"rope_scaling": {"rope_type": "yarn", "factor": 4}}']));
  assert.deepEqual(o.hfOverrides, { rope_scaling: { rope_type: 'yarn', factor: 4 } });
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).hfOverrides, null);
  assert.throws(() => parse(['--model', '/m', '--hf-overrides', '{rope']), /--hf-overrides: not JSON/);
  assert.throws(() => parse(['--model', '/m', '--hf-overrides', '[1]']), /--hf-overrides: expected a JSON object/);
});

test('--max-model-len takes vLLM\'s human-readable sizes; --tokenizer reaches EngineOptions', () => {
  const len = (v: string) => engineOptionsFromFlags(parse(['--model', '/m', '--max-model-len', v])).maxModelLen;
  assert.deepEqual(['4096', '32k', '32K', '25.6k', '1M'].map(len), [4096, 32000, 32768, 25600, 1048576]);
  for (const bad of ['abc', '0', '1.5', '-4k', '4x']) assert.throws(() => len(bad), /--max-model-len: expected a positive integer/, bad);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--tokenizer', '/t'])).tokenizer, '/t');
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).tokenizer, null);
});

test('integer and number flags refuse other values through commander, naming the flag and the value', () => {
  const errorOf = (argv: string[]): string => {
    let err = '';
    const cmd = addEngineFlags(new Command('x')).exitOverride()
      .configureOutput({ writeErr: (s) => { err += s; }, writeOut: () => {} });
    assert.throws(() => cmd.parse(argv, { from: 'user' }));
    return err;
  };
  assert.match(errorOf(['--seed', 'x']), /option '--seed <n>' argument 'x' is invalid\. expected an integer\./);
  assert.match(errorOf(['--block-size', '1.5']), /option '--block-size <n>' argument '1\.5' is invalid\. expected a positive integer\./);
  assert.match(errorOf(['--gpu-memory-utilization', 'lots']),
    /option '--gpu-memory-utilization <f>' argument 'lots' is invalid\. --gpu-memory-utilization: expected a fraction in \(0, 1\]/);
  assert.match(errorOf(['--seed', '']), /argument '' is invalid\. expected an integer\./, 'an empty value is not 0');
  assert.equal(parse(['--model', '/m', '--seed', '7']).seed, 7);
});

test('--speculative-config: vLLM\'s JSON reaches EngineOptions parsed; an unknown field or method is refused by name', () => {
  const o = engineOptionsFromFlags(parse(['--model', '/m', '--speculative-config',
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}']));
  assert.deepEqual(o.speculativeConfig, { method: 'ngram', numSpeculativeTokens: 3, promptLookupMin: 4, promptLookupMax: 4 });
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).speculativeConfig, null);
  assert.throws(() => parse(['--speculative-config', '{"method": "ngram", "num_speculative_tokens": 3, "k": 1}']),
    /--speculative-config <json>' argument .*unknown or unsupported field "k"/);
  assert.deepEqual(engineOptionsFromFlags(parse(['--model', '/m', '--speculative-config',
    '{"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}'])).speculativeConfig,
  { method: 'draft_model', model: '/d', numSpeculativeTokens: 3, disableByBatchSize: 2 });
  assert.deepEqual(engineOptionsFromFlags(parse(['--model', '/m', '--speculative-config',
    '{"method": "eagle3", "model": "/h", "num_speculative_tokens": 3}'])).speculativeConfig,
  { method: 'eagle3', model: '/h', numSpeculativeTokens: 3 });
  assert.throws(() => parse(['--speculative-config', '{"method": "eagle", "model": "/d", "num_speculative_tokens": 3}']),
    /method "eagle" is not supported yet/);
});

test('--data-parallel-size reaches EngineOptions.dataParallelSize for every engine command (bench, gate)', () => {
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).dataParallelSize, 1);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--data-parallel-size', '2'])).dataParallelSize, 2);
  assert.throws(() => parse(['--model', '/m', '--data-parallel-size', '0']), /--data-parallel-size.*positive integer/);
});
