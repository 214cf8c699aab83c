// vLLM's `vllm serve` flags in common use, and what Quire does with each: the one list that docs/vllm-flags.md is
// written from (scripts/vllm-flags-doc.mjs) and that test/cli/vllm-flags.test.ts parses row by row, so the two cannot
// drift. Flags Quire implements are declared where they act (engine-flags.ts, serve.ts); the flags it only accepts, or
// refuses, are declared here (addVllmCompatFlags).

import { Command, InvalidArgumentError, Option } from 'commander';

export type VllmFlagStatus = 'same' | 'mapped' | 'accepted' | 'refused';

export interface VllmFlagRow {
  /** The flag as vLLM spells it (a boolean pair as `--x / --no-x`). */
  flag: string;
  status: VllmFlagStatus;
  /** What Quire does with it. */
  quire: string;
  /** Command lines a test parses with `quire serve` (each must parse; for a refused flag, each must fail). */
  argv: readonly (readonly string[])[];
}

/** A flag Quire accepts only with the values that match what it does, or refuses outright. */
interface CompatFlag {
  flag: string;
  /** The value's placeholder; none for a boolean (declared as a --x / --no-x pair). */
  value?: string;
  /** Values accepted (a boolean: accepted when off); any other is refused with `why`. Absent: every value accepted. */
  accepted?: readonly string[];
  why: string;
  /** A boolean refused when on (--x), accepted off (--no-x). */
  refusedWhenOn?: boolean;
  /** An example value for the table's test. */
  example?: string;
}

const COMPAT: readonly CompatFlag[] = [
  { flag: '--tokenizer-mode', value: '<mode>', accepted: ['auto', 'hf'], why: 'Quire reads tokenizer.json (the fast tokenizer) only' },
  { flag: '--load-format', value: '<format>', accepted: ['auto', 'safetensors'], why: 'Quire loads safetensors weights' },
  { flag: '--model-impl', value: '<impl>', accepted: ['auto', 'vllm'], why: 'Quire runs its own model code only' },
  { flag: '--download-dir', value: '<dir>', why: 'no effect: Quire downloads nothing (a model directory, or a repo id already in the Hugging Face cache)', example: '/tmp/hf' },
  { flag: '--revision', value: '<rev>', accepted: ['main'], why: 'Quire loads the files in the model directory as they are' },
  { flag: '--logprobs-mode', value: '<m>', accepted: ['raw_logprobs'], why: 'logprobs are of the raw logits' },
  { flag: '--swap-space', value: '<GiB>', why: 'no effect: as in vLLM V1, a preempted request is recomputed, not swapped', example: '4' },
  { flag: '--cpu-offload-gb', value: '<GiB>', accepted: ['0'], why: 'weights are not offloaded to the CPU' },
  { flag: '--num-gpu-blocks-override', value: '<n>', why: 'size the KV cache with --kv-cache-memory-bytes or --gpu-memory-utilization', accepted: [] , example: '512' },
  { flag: '--calculate-kv-scales', refusedWhenOn: true, why: 'the FP8 KV cache uses scale 1' },
  { flag: '--prefix-caching-hash-algo', value: '<algo>', accepted: ['sha256'], why: 'prefix hashes are SHA-256, chained' },
  { flag: '--max-num-partial-prefills', value: '<n>', accepted: ['1'], why: 'one long prompt is prefilled at a time per step budget' },
  { flag: '--cuda-graph-sizes', value: '<n...>', why: 'no effect: Quire picks its CUDA graph batch sizes itself (--enforce-eager: none)', example: '64' },
  { flag: '--compilation-config', value: '<json>', why: 'no effect: nothing is compiled by torch (CUDA graphs: --enforce-eager)', example: '{}' },
  { flag: '--max-seq-len-to-capture', value: '<n>', why: 'no effect: every decode step is captured', example: '8192' },
  { flag: '--distributed-executor-backend', value: '<b>', accepted: ['mp', 'uni'], why: 'one GPU per engine, no Ray' },
  { flag: '--max-parallel-loading-workers', value: '<n>', why: 'no effect: weights load in one pass', example: '2' },
  { flag: '--enable-lora', refusedWhenOn: true, why: 'LoRA adapters are not supported' },
  { flag: '--lora-modules', value: '<specs...>', accepted: [], why: 'LoRA adapters are not supported', example: 'a=/lora/a' },
  { flag: '--enable-sleep-mode', refusedWhenOn: true, why: 'sleep mode is not supported' },
  { flag: '--limit-mm-per-prompt', value: '<json>', accepted: [], why: 'Quire serves text models only', example: '{"image": 1}' },
  { flag: '--guided-decoding-backend', value: '<b>', accepted: ['auto', 'xgrammar'], why: 'structured outputs use xgrammar' },
  { flag: '--structured-outputs-config', value: '<json>', why: 'no effect: structured outputs use xgrammar', example: '{"backend": "xgrammar"}' },
  { flag: '--tool-parser-plugin', value: '<file>', accepted: [], why: 'Python plugins cannot load: the parsers are --tool-call-parser\'s', example: 'p.py' },
  { flag: '--chat-template-content-format', value: '<f>', accepted: ['auto', 'string', 'openai'], why: 'auto, string or openai' },
  { flag: '--response-role', value: '<role>', accepted: ['assistant'], why: 'answers come as the assistant' },
  { flag: '--disable-uvicorn-access-log', why: 'no effect: there is no access log unless --enable-log-requests' },
  { flag: '--disable-fastapi-docs', why: 'no effect: Quire serves no docs pages' },
  { flag: '--disable-frontend-multiprocessing', why: 'no effect: the engine runs in a worker thread either way' },
  { flag: '--api-server-count', value: '<n>', accepted: ['1'], why: 'one HTTP server per engine' },
  { flag: '--max-log-len', value: '<n>', why: 'no effect: requests are logged without their prompts', example: '100' },
  { flag: '--ssl-keyfile', value: '<file>', accepted: [], why: 'no TLS: put a TLS proxy in front of Quire', example: 'k.pem' },
  { flag: '--ssl-certfile', value: '<file>', accepted: [], why: 'no TLS: put a TLS proxy in front of Quire', example: 'c.pem' },
  { flag: '--config', value: '<yaml>', accepted: [], why: 'a YAML config file is not read: pass the flags on the command line', example: 'c.yaml' },
];

/** The flags Quire implements (declared in engine-flags.ts and serve.ts), with what each does. */
const IMPLEMENTED: readonly VllmFlagRow[] = [
  { flag: 'model (positional) / --model', status: 'same', quire: 'a model directory or a repo id in the Hugging Face cache', argv: [['/m'], ['--model', '/m']] },
  { flag: '--host', status: 'same', quire: 'address to listen on (default 127.0.0.1; vLLM: all interfaces)', argv: [['--host', '0.0.0.0']] },
  { flag: '--port', status: 'same', quire: 'port (default 8000)', argv: [['--port', '8001']] },
  { flag: '--api-key', status: 'same', quire: 'Bearer key on /v1 routes', argv: [['--api-key', 'k']] },
  { flag: '--served-model-name', status: 'same', quire: 'the names the API answers to', argv: [['--served-model-name', 'a', 'b']] },
  { flag: '--max-model-len', status: 'same', quire: 'context length; 32k = 32,000, 32K = 32,768', argv: [['--max-model-len', '32k']] },
  { flag: '--dtype', status: 'mapped', quire: 'auto, bfloat16, bf16: bfloat16 on CUDA, float32 on the CPU; others refused', argv: [['--dtype', 'bfloat16']] },
  { flag: '--quantization / -q', status: 'mapped', quire: 'fp8 (block FP8 at load); others refused', argv: [['--quantization', 'fp8'], ['-q', 'fp8']] },
  { flag: '--tokenizer', status: 'same', quire: 'tokenizer and chat template from another directory', argv: [['--tokenizer', '/t']] },
  { flag: '--hf-overrides', status: 'same', quire: 'JSON fields over config.json', argv: [['--hf-overrides', '{"rope_theta": 1e6}']] },
  { flag: '--seed', status: 'same', quire: 'engine RNG seed', argv: [['--seed', '1']] },
  { flag: '--trust-remote-code / --no-trust-remote-code', status: 'accepted', quire: 'needless: no code from the model directory runs', argv: [['--trust-remote-code'], ['--no-trust-remote-code']] },
  { flag: '--gpu-memory-utilization', status: 'same', quire: 'fraction of the GPU this engine may hold, in (0, 1]', argv: [['--gpu-memory-utilization', '0.8']] },
  { flag: '--kv-cache-memory-bytes', status: 'same', quire: 'bytes for the KV cache (2G, 512M...); --kv-cache-memory is an alias', argv: [['--kv-cache-memory-bytes', '2G'], ['--kv-cache-memory', '1000000']] },
  { flag: '--kv-cache-dtype', status: 'mapped', quire: 'auto, bfloat16, fp8, fp8_e4m3 (scale 1); fp8_e5m2 refused', argv: [['--kv-cache-dtype', 'fp8']] },
  { flag: '--mamba-ssm-cache-dtype', status: 'mapped', quire: 'auto (= float32, as Qwen3.5\'s config asks), float32, bfloat16 (gated DeltaNet states rounded to bf16 each step); float16 refused', argv: [['--mamba-ssm-cache-dtype', 'bfloat16']] },
  { flag: '--speculative-config', status: 'mapped', quire: 'methods ngram (prompt lookup: num_speculative_tokens, prompt_lookup_min, prompt_lookup_max), draft_model (model, num_speculative_tokens) and mtp (num_speculative_tokens; the Qwen3.5 / Qwen3.6 / Qwen3-Next checkpoint\'s own head; qwen3_5_mtp and qwen3_next_mtp are the same) and eagle3 (model: an EAGLE-3 head of the published Llama layout, num_speculative_tokens); eagle refused as not yet supported', argv: [['--speculative-config', '{"method": "ngram", "num_speculative_tokens": 3}']] },
  { flag: '--block-size', status: 'same', quire: 'KV page size in tokens', argv: [['--block-size', '32']] },
  { flag: '--enable-prefix-caching / --no-enable-prefix-caching', status: 'same', quire: 'prefix caching, on by default', argv: [['--enable-prefix-caching'], ['--no-enable-prefix-caching']] },
  { flag: '--enforce-eager / --no-enforce-eager', status: 'same', quire: 'CUDA graphs off / on', argv: [['--enforce-eager'], ['--no-enforce-eager']] },
  { flag: '--max-num-seqs', status: 'same', quire: 'most sequences at once (at least 1)', argv: [['--max-num-seqs', '64']] },
  { flag: '--max-num-batched-tokens', status: 'same', quire: 'token budget per step; vLLM\'s per-device defaults', argv: [['--max-num-batched-tokens', '8192']] },
  { flag: '--enable-chunked-prefill / --no-enable-chunked-prefill', status: 'same', quire: 'chunked prefill, on by default', argv: [['--enable-chunked-prefill'], ['--no-enable-chunked-prefill']] },
  { flag: '--long-prefill-token-threshold', status: 'same', quire: 'most prompt tokens a request gets per step', argv: [['--long-prefill-token-threshold', '512']] },
  { flag: '--scheduling-policy', status: 'same', quire: 'fcfs or priority', argv: [['--scheduling-policy', 'priority']] },
  { flag: '--async-scheduling / --no-async-scheduling', status: 'same', quire: 'overlap scheduling with the running step, on by default', argv: [['--async-scheduling'], ['--no-async-scheduling']] },
  { flag: '--tensor-parallel-size / -tp', status: 'same', quire: 'the model split over N GPUs (rank r on CUDA device r, a worker thread each; all-reduces over NCCL; threads in shared memory on the CPU backend); dense, mixture-of-experts and hybrid models, bf16; block-FP8 checkpoints refused for now', argv: [['--tensor-parallel-size', '2'], ['-tp', '2'], ['-tp', '1']] },
  { flag: '--enable-expert-parallel / --no-enable-expert-parallel', status: 'same', quire: 'a mixture of experts\' experts held whole, num_experts / tp a rank (linear placement; the first num_experts mod tp ranks one more), each rank running only its own experts\' share of the routed tokens, the router replicated and the partial outputs summed by the all-reduce after the layer; attention, dense MLPs and shared experts stay tensor-parallel; fewer experts than ranks refused; no effect on a dense model or at -tp 1, as in vLLM', argv: [['--enable-expert-parallel'], ['--no-enable-expert-parallel']] },
  { flag: '--expert-placement-strategy', status: 'same', quire: 'linear (contiguous ranges) or round_robin (expert e on rank e mod tp)', argv: [['--expert-placement-strategy', 'round_robin']] },
  { flag: '--pipeline-parallel-size / -pp', status: 'same', quire: 'the layers split into N contiguous stages as vLLM splits them (QUIRE_PP_LAYER_PARTITION as VLLM_PP_LAYER_PARTITION), each of --tensor-parallel-size GPUs, the residual stream sent from stage to stage (NCCL send/recv; shared memory between threads on the CPU backend); each stage\'s KV cache holds its layers only; up to N steps of other requests in flight, so each stage works on one (vLLM\'s batch queue); the last stage (logits, sampling) runs with the engine, on CUDA device 0; more stages than layers, or ranks than GPUs, is a start-up error', argv: [['--pipeline-parallel-size', '2'], ['-pp', '2'], ['-pp', '1']] },
  { flag: '--data-parallel-size / -dp', status: 'same', quire: 'N engine replicas, one per GPU (replica i on CUDA device i; any number on the CPU backend), each request sent to the least-loaded one or to the one holding its prompt prefix in cache; more than the visible GPUs is a start-up error', argv: [['--data-parallel-size', '2'], ['-dp', '2'], ['--data-parallel-size', '1']] },
  { flag: '--chat-template', status: 'same', quire: 'a template file, or the template itself', argv: [['--chat-template', '{{ messages[0].content }}']] },
  { flag: '--trust-request-chat-template', status: 'same', quire: 'accept a chat_template in a request', argv: [['--trust-request-chat-template']] },
  { flag: '--generation-config', status: 'same', quire: 'auto, vllm, or a folder', argv: [['--generation-config', 'vllm']] },
  { flag: '--override-generation-config', status: 'same', quire: 'default sampling fields over those', argv: [['--override-generation-config', '{"temperature": 0.5}']] },
  { flag: '--max-logprobs', status: 'same', quire: 'most logprobs a request may ask for (-1: the vocabulary)', argv: [['--max-logprobs', '5']] },
  { flag: '--return-tokens-as-token-ids', status: 'same', quire: 'logprobs name tokens token_id:<id>', argv: [['--return-tokens-as-token-ids']] },
  { flag: '--enable-auto-tool-choice', status: 'same', quire: 'tool_choice "auto" (needs --tool-call-parser)', argv: [['--enable-auto-tool-choice', '--tool-call-parser', 'hermes']] },
  { flag: '--tool-call-parser', status: 'mapped', quire: 'hermes, llama3_json, mistral; others refused', argv: [['--tool-call-parser', 'hermes']] },
  { flag: '--reasoning-parser', status: 'mapped', quire: 'qwen3, deepseek_r1; others refused', argv: [['--reasoning-parser', 'qwen3']] },
  { flag: '--runner / --task / --convert', status: 'mapped', quire: 'generate, or pooling for /v1/embeddings', argv: [['--runner', 'pooling'], ['--task', 'embed'], ['--convert', 'embed']] },
  { flag: '--pooler-config', status: 'same', quire: 'pooling type and normalization', argv: [['--runner', 'pooling', '--pooler-config', '{"normalize": true}']] },
  { flag: '--allowed-origins / --allowed-methods / --allowed-headers', status: 'same', quire: 'CORS, JSON lists', argv: [['--allowed-origins', '["*"]']] },
  { flag: '--allow-credentials', status: 'same', quire: 'CORS credentials', argv: [['--allow-credentials']] },
  { flag: '--disable-log-stats', status: 'same', quire: 'no stats line every 10 s', argv: [['--disable-log-stats']] },
  { flag: '--enable-log-requests / --no-enable-log-requests', status: 'mapped', quire: 'a log line per HTTP request (Fastify\'s logger, at --uvicorn-log-level)', argv: [['--enable-log-requests'], ['--no-enable-log-requests']] },
  { flag: '--disable-log-requests', status: 'same', quire: 'vLLM\'s older flag: no request log (the default)', argv: [['--disable-log-requests']] },
  { flag: '--uvicorn-log-level', status: 'mapped', quire: 'the HTTP server\'s log level (critical, error, warning, info, debug, trace); on at that level when other than info', argv: [['--uvicorn-log-level', 'warning']] },
];

/** Every row of the table: the flags Quire implements, then those it accepts or refuses. */
export function vllmFlagTable(): VllmFlagRow[] {
  return [...IMPLEMENTED, ...COMPAT.map(compatRow)];
}

function compatRow(c: CompatFlag): VllmFlagRow {
  if (c.value === undefined) {
    const pair = `${c.flag} / --no-${c.flag.slice(2)}`;
    if (c.refusedWhenOn) return { flag: pair, status: 'refused', quire: `refused: ${c.why}`, argv: [[c.flag]] };
    return { flag: pair, status: 'accepted', quire: c.why, argv: [[c.flag], [`--no-${c.flag.slice(2)}`]] };
  }
  if (c.accepted === undefined) return { flag: c.flag, status: 'accepted', quire: c.why, argv: [[c.flag, c.example!]] };
  if (c.accepted.length === 0) {
    return { flag: c.flag, status: 'refused', quire: `refused: ${c.why}`, argv: [[c.flag, c.example!]] };
  }
  return { flag: c.flag, status: 'accepted', quire: `${c.accepted.join(', ')} accepted; others refused: ${c.why}`,
    argv: c.accepted.map((v) => [c.flag, v]) };
}

/**
 * Declares the flags Quire accepts for vLLM command lines but does not act on, or refuses with the reason (hidden
 * from --help, which points to the table).
 */
export function addVllmCompatFlags(cmd: Command): Command {
  cmd.addHelpText('after', `${COMPAT.length} more of vLLM's flags are accepted (no effect here) or refused with the `
    + 'reason:\ndocs/vllm-flags.md lists them.');
  for (const c of COMPAT) {
    if (c.value === undefined) {
      const on = new Option(c.flag).hideHelp();
      cmd.addOption(on).addOption(new Option(`--no-${c.flag.slice(2)}`).hideHelp());
      if (c.refusedWhenOn) {
        cmd.on(`option:${c.flag.slice(2)}`, () => cmd.error(`quire ${cmd.name()}: ${c.flag}: ${c.why}`, { exitCode: 2 }));
      }
      continue;
    }
    const accepted = c.accepted;
    const option = new Option(`${c.flag} ${c.value}`).hideHelp().argParser((v: string) => {
      if (accepted !== undefined && !accepted.includes(v)) {
        throw new InvalidArgumentError(accepted.length === 0 ? `${c.flag}: ${c.why}`
          : `${c.flag} ${v}: ${c.why} (accepted: ${accepted.join(', ')})`);
      }
      return v;
    });
    cmd.addOption(option);
  }
  return cmd;
}

/** docs/vllm-flags.md, from the table. */
export function vllmFlagMarkdown(): string {
  const words: Record<VllmFlagStatus, string> = {
    same: 'as vLLM', mapped: 'mapped', accepted: 'accepted', refused: 'refused',
  };
  const lines = [
    '# vLLM\'s `vllm serve` flags in Quire',
    '',
    '<!-- Written from src/cli/vllm-flags.ts by scripts/vllm-flags-doc.mjs; test/cli/vllm-flags.test.ts parses each row. -->',
    '',
    'A `vllm serve` command line runs as it is with `quire serve`: each flag below does what vLLM does ("as vLLM"),',
    'is translated to what Quire does ("mapped"), is accepted because it matches what Quire does or has no',
    'effect here ("accepted"), or is refused with the reason ("refused"). Boolean flags come in pairs as',
    'vLLM\'s argparse BooleanOptionalAction declares them: `--x` and `--no-x`. A flag not listed is unknown',
    'to Quire and refused by name.',
    '',
    '| vLLM flag | | Quire |',
    '|---|---|---|',
  ];
  for (const r of vllmFlagTable()) lines.push(`| \`${r.flag}\` | ${words[r.status]} | ${r.quire.replace(/\|/g, '\\|')} |`);
  return lines.join('\n') + '\n';
}
