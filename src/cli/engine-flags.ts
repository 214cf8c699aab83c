// Engine flags shared by every command that runs a model (vLLM's names).

import { Command, InvalidArgumentError, Option } from 'commander';
import { engineOptions, type EngineOptions } from '../engine/options.js';
import { defaultModelDir } from './default-model.js';
import { int, num } from './option-parsers.js';
import type { KvCacheDtype } from '../loader/fp8.js';

/** vLLM's human-readable sizes: 1k = 1,000, 1K = 1,024 (m / M and g / G likewise); a plain integer as it is. */
export function parseHumanInt(name: string, v: string): number {
  const m = /^(\d+(?:\.\d+)?)([kmgKMG]?)$/.exec(v.trim());
  const unit = m?.[2] ? { k: 1e3, m: 1e6, g: 1e9, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30 }[m[2]]! : 1;
  const n = m ? Number(m[1]) * unit : NaN;
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`${name}: expected a positive integer such as 4096, 32k or 32K, got "${v}"`);
  return n;
}

function humanInt(name: string) {
  return (v: string): number => parseHumanInt(name, v);
}

/** --hf-overrides: a JSON object (its fields replace config.json's top-level ones). */
function hfOverrides(v: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(v);
  } catch (e) {
    throw new InvalidArgumentError(`--hf-overrides: not JSON (${(e as Error).message})`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InvalidArgumentError('--hf-overrides: expected a JSON object of config.json fields');
  }
  return parsed as Record<string, unknown>;
}

/**
 * vLLM flags that name what Quire always does, accepted with that value so vLLM command lines run unchanged, and
 * refused with the reason for any other.
 */
function only(flag: string, accepted: readonly string[], why: string) {
  return (v: string): string => {
    if (!accepted.includes(v)) throw new InvalidArgumentError(`${flag} ${v}: ${why} (accepted: ${accepted.join(', ')})`);
    return v;
  };
}

/** --kv-cache-dtype: vLLM's names (auto, bfloat16; fp8, fp8_e4m3); FP8 E5M2 is refused. */
export function kvCacheDtypeArg(v: string): KvCacheDtype {
  if (v === 'auto' || v === 'bfloat16') return 'auto';
  if (v === 'fp8' || v === 'fp8_e4m3') return 'fp8_e4m3';
  throw new InvalidArgumentError(`--kv-cache-dtype ${v}: not supported (accepted: auto, bfloat16, fp8, fp8_e4m3; `
    + 'FP8 is E4M3 only)');
}

/** --quantization: vLLM's fp8 (weights quantized at load, activations per token); other methods are refused. */
export function quantizationArg(v: string): 'fp8' {
  if (v === 'fp8') return 'fp8';
  throw new InvalidArgumentError(`--quantization ${v}: not supported (accepted: fp8, which quantizes a float checkpoint's `
    + 'projections to block FP8 at load; checkpoints already quantized as block FP8 need no flag)');
}

/** vLLM's short forms that commander cannot declare (-tp, -pp): their long names. */
export function vllmShortFlags(argv: readonly string[]): string[] {
  const long: Record<string, string> = { '-tp': '--tensor-parallel-size', '-pp': '--pipeline-parallel-size' };
  return argv.map((a) => long[a] ?? a);
}

export function addEngineFlags(cmd: Command): Command {
  return cmd
    .option('--model <dir>', 'Hugging Face model directory (default: the bundled demo model)')
    .addOption(new Option('--backend <kind>', 'compute backend').choices(['auto', 'cpu', 'cuda']).default('auto'))
    .option('--block-size <n>', 'KV page size in tokens', int, 16)
    .option('--max-num-seqs <n>', 'most sequences running at once', int)
    .option('--max-num-batched-tokens <n>', 'token budget per step (default as vLLM: on GPUs of 70 GiB and more, A100 aside, 16384 offline and 8192 for serve; 8192 / 2048 on smaller GPUs; 2048 on the CPU backend)', int)
    .option('--max-model-len <n>', 'context length served (default: the model\'s); as vLLM, 32k = 32,000 and 32K = 32,768', humanInt('--max-model-len'))
    .option('--no-enable-prefix-caching', 'disable automatic prefix caching')
    .option('--enable-chunked-prefill', 'prefill prompts longer than a step\'s budget over several steps (the default)')
    .option('--no-enable-chunked-prefill', 'a prompt in one step (needs --max-num-batched-tokens >= --max-model-len)')
    .option('--long-prefill-token-threshold <n>', 'most prompt tokens one request gets per step (0: the budget)',
      int, 0)
    .option('--dtype <t>', 'as vLLM; Quire computes in bfloat16 on CUDA (float32 on the CPU backend)',
      only('--dtype', ['auto', 'bfloat16', 'bf16'], 'Quire computes in bfloat16 on CUDA and float32 on the CPU backend'), 'auto')
    .option('--kv-cache-dtype <t>', 'as vLLM: auto (the compute dtype) or fp8 (= fp8_e4m3: half the bytes a token, '
      + 'so twice the tokens in the same memory; lossy, scale 1)', kvCacheDtypeArg, 'auto')
    .option('-q, --quantization <method>', 'as vLLM: fp8 quantizes the projections of a float checkpoint to FP8 at load '
      + '(128 x 128 blocks, activations per token and 128 columns: about a third faster decode on large models, half their '
      + 'weight memory; lossy)', quantizationArg)
    .option('--tensor-parallel-size <n>', 'as vLLM (-tp); one GPU per engine',
      only('--tensor-parallel-size', ['1'], 'tensor parallelism is not supported yet: one GPU per engine'), '1')
    .option('--pipeline-parallel-size <n>', 'as vLLM (-pp); one GPU per engine',
      only('--pipeline-parallel-size', ['1'], 'pipeline parallelism is not supported yet: one GPU per engine'), '1')
    .option('--trust-remote-code', 'as vLLM; accepted and needless: Quire runs no code from the model directory', false)
    .addOption(new Option('--scheduling-policy <p>', 'request order').choices(['fcfs', 'priority']).default('fcfs'))
    .addOption(new Option('--step-policy <p>', 'what a step admits').choices(['decode-first', 'prefill-first', 'decode-shape-stable']).default('decode-first'))
    .option('--gpu-memory-utilization <f>', 'fraction of the GPU memory this engine may hold (as vLLM: other processes do not count)', num, 0.9)
    .option('--kv-cache-memory <bytes>', 'bytes for the KV cache (CPU default 256 MiB)', int)
    .option('--enforce-eager', 'disable CUDA graphs', false)
    .option('--no-async-scheduling', 'complete each step before scheduling the next (by default a step is scheduled and launched while the previous one runs)')
    .option('--batch-invariant', 'CUDA: kernels whose sums do not depend on the batch, so a greedy transcript does not change with batch size, other requests, chunking, preemption or prefix-cache hits (slower at large batches)', false)
    .option('--profile', 'CUDA: time every op (graph replays through event-record nodes); print one table per step shape to stderr', false)
    .option('--seed <n>', 'engine RNG seed', int, 0)
    .option('--scheduler-trace', 'record the admission trace and print it at shutdown', false)
    .option('--cpu-threads <n>', 'threads for CPU matmuls (0 = every core)', int, 0)
    .option('--tokenizer <dir>', 'as vLLM: the tokenizer and chat template from this directory (or cached repo id) instead of the model\'s')
    .option('--hf-overrides <json>', 'as vLLM: a JSON object whose fields replace config.json\'s, e.g. \'{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}\'',
      hfOverrides);
}

export function engineOptionsFromFlags(f: Record<string, unknown>): EngineOptions {
  const o = engineOptions({
    model: (f.model as string | undefined) ?? defaultModelDir(),
    backend: f.backend as EngineOptions['backend'],
    blockSize: f.blockSize as number,
    maxNumBatchedTokens: (f.maxNumBatchedTokens as number | undefined) ?? null,
    maxModelLen: (f.maxModelLen as number | undefined) ?? null,
    enablePrefixCaching: f.enablePrefixCaching as boolean,
    enableChunkedPrefill: (f.enableChunkedPrefill as boolean | undefined) ?? true,
    longPrefillTokenThreshold: f.longPrefillTokenThreshold as number,
    schedulingPolicy: f.schedulingPolicy as EngineOptions['schedulingPolicy'],
    stepPolicy: f.stepPolicy as EngineOptions['stepPolicy'],
    gpuMemoryUtilization: f.gpuMemoryUtilization as number,
    kvCacheBytes: (f.kvCacheMemory as number | undefined) ?? null,
    kvCacheDtype: (f.kvCacheDtype as KvCacheDtype | undefined) ?? 'auto',
    quantization: (f.quantization as 'fp8' | undefined) ?? null,
    enforceEager: f.enforceEager as boolean,
    asyncScheduling: f.asyncScheduling as boolean,
    batchInvariant: f.batchInvariant as boolean,
    profile: f.profile as boolean,
    seed: f.seed as number,
    schedulerTrace: f.schedulerTrace as boolean,
    cpuThreads: f.cpuThreads as number,
    hfOverrides: (f.hfOverrides as Record<string, unknown> | undefined) ?? null,
    tokenizer: (f.tokenizer as string | undefined) ?? null,
  });
  if (f.maxNumSeqs !== undefined) o.maxNumSeqs = f.maxNumSeqs as number;
  return o;
}
