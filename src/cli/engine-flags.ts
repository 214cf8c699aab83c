// Engine flags shared by every command that runs a model (vLLM's names).

import { Command, InvalidArgumentError, Option } from 'commander';
import { engineOptions, type EngineOptions, type SsmCacheDtype } from '../engine/options.js';
import { defaultModelDir } from './default-model.js';
import { atLeast, int } from './option-parsers.js';
import type { KvCacheDtype } from '../loader/fp8.js';
import { parseSpeculativeConfig, SpeculativeConfigError, type SpeculativeConfig } from '../engine/spec/config.js';

/** --speculative-config: vLLM's JSON, checked here so that a bad one fails before the model loads. */
function speculativeConfigArg(v: string): SpeculativeConfig {
  try {
    return parseSpeculativeConfig(v);
  } catch (e) {
    if (e instanceof SpeculativeConfigError) throw new InvalidArgumentError(e.message.replace(/^--speculative-config: /, ''));
    throw e;
  }
}

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

/**
 * --mamba-ssm-cache-dtype: vLLM's names. 'auto' keeps f32 states: Qwen3.5's config asks for float32 (vLLM reads it);
 * vLLM's auto is the model dtype where a config says nothing (Qwen3-Next), and its docs still ask for float32 there.
 */
export function mambaSsmCacheDtypeArg(v: string): SsmCacheDtype {
  if (v === 'auto' || v === 'float32') return 'f32';
  if (v === 'bfloat16') return 'bf16';
  throw new InvalidArgumentError(`--mamba-ssm-cache-dtype ${v}: not supported (accepted: auto, float32, bfloat16)`);
}

/** --quantization: vLLM's fp8 (weights quantized at load, activations per token); other methods are refused. */
export function quantizationArg(v: string): 'fp8' {
  if (v === 'fp8') return 'fp8';
  throw new InvalidArgumentError(`--quantization ${v}: not supported (accepted: fp8, which quantizes a float checkpoint's `
    + 'projections to block FP8 at load; checkpoints already quantized as block FP8 need no flag)');
}

/** vLLM's short forms that commander cannot declare (-tp, -pp, -dp): their long names. */
export function vllmShortFlags(argv: readonly string[]): string[] {
  const long: Record<string, string> = { '-tp': '--tensor-parallel-size', '-pp': '--pipeline-parallel-size',
    '-dp': '--data-parallel-size' };
  return argv.map((a) => long[a] ?? a);
}

/** The headings `--help` groups flags under (vLLM's groups, and Quire's lab). */
export const HELP_GROUPS = {
  model: 'Model:',
  engine: 'Engine and KV cache:',
  scheduling: 'Scheduling:',
  server: 'Server:',
  tools: 'Tools, reasoning and pooling:',
  lab: 'Lab and debugging:',
  vllm: 'Accepted for vLLM command lines (see docs/vllm-flags.md):',
} as const;

/**
 * A boolean flag as vLLM's argparse BooleanOptionalAction declares it: `--x` and `--no-x` (the second hidden from
 * --help, named in the first's description).
 */
export function addBooleanPair(cmd: Command, flag: string, description: string, defaultValue: boolean,
  group?: string): Command {
  const on = new Option(flag, description)
    .default(defaultValue, defaultValue ? `on; --no-${flag.slice(2)} turns it off` : 'off');
  const off = new Option(`--no-${flag.slice(2)}`).hideHelp();
  if (group) {
    on.helpGroup(group);
    off.helpGroup(group);
  }
  return cmd.addOption(on).addOption(off);
}

/** The flags of every command that loads a model (generate and chat take these alone). */
export function addModelFlags(cmd: Command): Command {
  cmd.addHelpText('after', '\nEach on/off flag also takes vLLM\'s --no- form (--no-enforce-eager, ...).')
    .configureHelp({ helpWidth: 100 })
    .optionsGroup(HELP_GROUPS.model)
    .option('--model <dir>', 'Hugging Face model directory or cached repo id (default: the bundled demo model)')
    .addOption(new Option('--backend <kind>', 'compute backend').choices(['auto', 'cpu', 'cuda']).default('auto'))
    .option('--max-model-len <n>', 'context length (default: the model\'s); 32k = 32,000, 32K = 32,768',
      humanInt('--max-model-len'))
    .option('--dtype <t>', 'bfloat16 on CUDA, float32 on the CPU backend (auto, bfloat16, bf16)',
      only('--dtype', ['auto', 'bfloat16', 'bf16'], 'Quire computes in bfloat16 on CUDA and float32 on the CPU backend'), 'auto')
    .option('-q, --quantization <method>', 'fp8: quantize a float checkpoint\'s projections to block FP8 at load '
      + '(about a third faster decode on large models, half their weight memory; lossy)', quantizationArg)
    .option('--tokenizer <dir>', 'the tokenizer and chat template from this directory (or cached repo id)')
    .option('--hf-overrides <json>', 'a JSON object whose fields replace config.json\'s, e.g. \'{"rope_scaling": '
      + '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}\'', hfOverrides)
    .option('--seed <n>', 'engine RNG seed', int, 0);
  addBooleanPair(cmd, '--trust-remote-code', 'accepted and needless: Quire runs no code from the model directory',
    false, HELP_GROUPS.model);
  cmd.optionsGroup(HELP_GROUPS.engine)
    .option('--gpu-memory-utilization <f>', 'fraction of the GPU memory this engine may hold, in (0, 1]',
      fraction('--gpu-memory-utilization'), 0.9)
    .option('--kv-cache-memory-bytes <bytes>', 'bytes for the KV cache, e.g. 2G (CPU default 256 MiB; '
      + 'on CUDA in place of --gpu-memory-utilization\'s share, as vLLM; --kv-cache-memory is the same)', humanInt('--kv-cache-memory-bytes'))
    .addOption(new Option('--kv-cache-memory <bytes>').argParser(humanInt('--kv-cache-memory')).hideHelp())
    .option('--kv-cache-dtype <t>', 'auto (the compute dtype) or fp8 (= fp8_e4m3: twice the tokens in the same '
      + 'memory; lossy, scale 1)', kvCacheDtypeArg, 'auto')
    .option('--mamba-ssm-cache-dtype <t>', 'gated DeltaNet states between steps: auto (= float32) or bfloat16 (half '
      + 'the state memory and bytes a step; lossy)', mambaSsmCacheDtypeArg, 'auto')
    .option('--cpu-threads <n>', 'threads for CPU matmuls (0 = every core)', atLeast(0), 0)
    .option('--grammar-hosts <n>', 'most threads that compile structured outputs\' grammars and hold their matchers, '
      + 'off the engine thread (each holds the vocabulary)', atLeast(1), 4);
  addBooleanPair(cmd, '--enforce-eager', 'CUDA: no CUDA graphs', false, HELP_GROUPS.engine);
  return cmd.optionsGroup('Options:');
}

/** Every engine flag: the model's, and those of the cache, the scheduler and the lab (serve, bench, gate). */
export function addEngineFlags(cmd: Command): Command {
  addModelFlags(cmd);
  cmd.optionsGroup(HELP_GROUPS.engine)
    .option('--block-size <n>', 'KV page size in tokens', atLeast(1), 16);
  addBooleanPair(cmd, '--enable-prefix-caching', 'reuse the KV pages of cached prompt prefixes', true, HELP_GROUPS.engine);
  cmd.option('--speculative-config <json>', 'speculative decoding, as vLLM: \'{"method": "ngram", '
    + '"num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}\', a draft model with the '
    + 'target\'s tokenizer: \'{"method": "draft_model", "model": DIR, "num_speculative_tokens": 4}\', the MTP head '
    + 'of a Qwen3.5 / Qwen3-Next checkpoint: \'{"method": "mtp", "num_speculative_tokens": 3}\', or an EAGLE-3 head: '
    + '\'{"method": "eagle3", "model": DIR, "num_speculative_tokens": 3}\'',
  speculativeConfigArg);
  cmd.optionsGroup(HELP_GROUPS.scheduling)
    .option('--max-num-seqs <n>', 'most sequences running at once (default 256)', atLeast(1))
    .option('--max-num-batched-tokens <n>', 'token budget per step (default as vLLM: 8192 for serve and 16384 '
      + 'offline on GPUs of 70 GiB and more, 2048 / 8192 on smaller ones, 2048 on the CPU)', humanInt('--max-num-batched-tokens'))
    .option('--long-prefill-token-threshold <n>', 'most prompt tokens one request gets per step (0: the budget)',
      atLeast(0), 0)
    .addOption(new Option('--scheduling-policy <p>', 'request order').choices(['fcfs', 'priority']).default('fcfs'))
    .addOption(new Option('--step-policy <p>', 'what a step admits (Quire)')
      .choices(['decode-first', 'prefill-first', 'decode-shape-stable']).default('decode-first'));
  addBooleanPair(cmd, '--enable-chunked-prefill', 'prefill a long prompt over several steps (off: in one step, '
    + 'which needs --max-num-batched-tokens >= --max-model-len)', true, HELP_GROUPS.scheduling);
  addBooleanPair(cmd, '--async-scheduling', 'schedule and launch a step while the previous one runs', true,
    HELP_GROUPS.scheduling);
  cmd.option('--tensor-parallel-size <n>', 'GPUs each engine\'s model is split over, as vLLM (-tp): heads and MLP '
    + 'widths split, rank r on CUDA device r, all-reduces over NCCL', atLeast(1), 1)
    .option('--pipeline-parallel-size <n>', 'stages each engine\'s layers are split over, as vLLM (-pp): contiguous '
      + 'layer ranges, each stage --tensor-parallel-size GPUs, the residual stream sent from stage to stage; the last '
      + 'stage (logits, sampling) on CUDA device 0, the first on the last device', atLeast(1), 1)
    .option('--data-parallel-size <n>', 'engine replicas, each a whole engine on its own GPU (replica i on CUDA device '
      + 'i; any number on the CPU), as vLLM (-dp); each request goes to the least-loaded one, or to the one holding '
      + 'its prompt\'s prefix in cache', atLeast(1), 1)
    .option('--disable-custom-all-reduce', 'tensor parallelism on CUDA: every all-reduce over NCCL (by default those '
      + 'of decode steps take a one-shot kernel over peer memory), as vLLM', false)
    .option('--nnodes <n>', 'machines the ranks span (CUDA), --tensor-parallel-size x --pipeline-parallel-size / n each, as '
      + 'vLLM and torchrun: node 0 serves, every other node runs the same command with its --node-rank', atLeast(1), 1)
    .option('--node-rank <n>', 'this machine\'s node (0: the server; others follow node 0)', atLeast(0), 0)
    .option('--master-addr <addr>', 'node 0\'s address, which it listens on for the other nodes', '127.0.0.1')
    .option('--master-port <port>', 'the port node 0 listens on for the other nodes', atLeast(1), 29501);
  addBooleanPair(cmd, '--enable-expert-parallel', 'a mixture of experts over --tensor-parallel-size ranks: each rank '
    + 'holds whole experts (num_experts / tp) and runs only the routed tokens\' contributions of its own, instead of a '
    + 'slice of every expert, as vLLM; attention, dense MLPs and shared experts still split; no effect on a dense '
    + 'model', false, HELP_GROUPS.scheduling);
  cmd.addOption(new Option('--expert-placement-strategy <s>', 'with --enable-expert-parallel, which experts a rank '
    + 'holds: contiguous ranges (linear), or expert e on rank e mod tp (round_robin), as vLLM')
    .choices(['linear', 'round_robin']).default('linear').helpGroup(HELP_GROUPS.scheduling));
  cmd.optionsGroup(HELP_GROUPS.lab);
  addBooleanPair(cmd, '--batch-invariant', 'CUDA: sums that do not depend on the batch, so a greedy transcript '
    + 'does not change with batch size, chunking, preemption or cache hits (slower at large batches)', false, HELP_GROUPS.lab);
  cmd.option('--profile', 'CUDA: time every op; one table per step shape to stderr', false)
    .option('--scheduler-trace', 'record the admission trace and print it at shutdown', false);
  return cmd.optionsGroup('Options:');
}

/** A fraction in (0, 1] (vLLM's --gpu-memory-utilization). */
function fraction(flag: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n) || n <= 0 || n > 1) {
      throw new InvalidArgumentError(`${flag}: expected a fraction in (0, 1], such as 0.9`);
    }
    return n;
  };
}

export function engineOptionsFromFlags(f: Record<string, unknown>): EngineOptions {
  const given: Partial<EngineOptions> = {
    model: (f.model as string | undefined) ?? defaultModelDir(),
    backend: f.backend as EngineOptions['backend'],
    blockSize: f.blockSize as number,
    maxNumBatchedTokens: (f.maxNumBatchedTokens as number | undefined) ?? null,
    maxModelLen: (f.maxModelLen as number | undefined) ?? null,
    enablePrefixCaching: f.enablePrefixCaching as boolean,
    enableChunkedPrefill: f.enableChunkedPrefill as boolean | undefined,
    longPrefillTokenThreshold: f.longPrefillTokenThreshold as number,
    schedulingPolicy: f.schedulingPolicy as EngineOptions['schedulingPolicy'],
    stepPolicy: f.stepPolicy as EngineOptions['stepPolicy'],
    gpuMemoryUtilization: f.gpuMemoryUtilization as number,
    kvCacheBytes: (f.kvCacheMemoryBytes as number | undefined) ?? (f.kvCacheMemory as number | undefined) ?? null,
    kvCacheDtype: (f.kvCacheDtype as KvCacheDtype | undefined) ?? 'auto',
    // the default ('auto', unparsed) is float32; a given value comes parsed
    mambaSsmCacheDtype: f.mambaSsmCacheDtype === 'bf16' ? 'bf16' : 'f32',
    quantization: (f.quantization as 'fp8' | undefined) ?? null,
    enforceEager: f.enforceEager as boolean,
    asyncScheduling: f.asyncScheduling as boolean,
    batchInvariant: f.batchInvariant as boolean,
    profile: f.profile as boolean,
    seed: f.seed as number,
    schedulerTrace: f.schedulerTrace as boolean,
    cpuThreads: f.cpuThreads as number,
    grammarHosts: f.grammarHosts as number | undefined,
    hfOverrides: (f.hfOverrides as Record<string, unknown> | undefined) ?? null,
    tokenizer: (f.tokenizer as string | undefined) ?? null,
    maxNumSeqs: f.maxNumSeqs as number | undefined,
    speculativeConfig: (f.speculativeConfig as SpeculativeConfig | undefined) ?? null,
    dataParallelSize: f.dataParallelSize as number | undefined,
    tensorParallelSize: f.tensorParallelSize as number | undefined,
    pipelineParallelSize: f.pipelineParallelSize as number | undefined,
    disableCustomAllReduce: f.disableCustomAllReduce as boolean | undefined,
    enableExpertParallel: f.enableExpertParallel as boolean | undefined,
    expertPlacementStrategy: f.expertPlacementStrategy as EngineOptions['expertPlacementStrategy'] | undefined,
    nnodes: f.nnodes as number | undefined,
    nodeRank: f.nodeRank as number | undefined,
    masterAddr: f.masterAddr as string | undefined,
    masterPort: f.masterPort as number | undefined,
  };
  for (const k of Object.keys(given) as (keyof EngineOptions)[]) if (given[k] === undefined) delete given[k];
  return engineOptions({ ...given, model: (f.model as string | undefined) ?? defaultModelDir() });
}
