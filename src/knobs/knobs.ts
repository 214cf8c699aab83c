// Every QUIRE_* environment variable, declared once (as vLLM's envs.py): its type, default, check and one line of
// doc. Code reads a knob through readKnob(); nothing else reads process.env for a QUIRE_* name (test/architecture
// checks it). A value that does not parse is an error naming the variable and the value, never a silent default;
// check-env.ts runs every check before the CLI's other modules load, so a bad value stops start-up with one line.
// docs/knobs.md is generated from this table (`node dist/src/knobs/knobs.js > docs/knobs.md`; a test compares).

import { pathToFileURL } from 'node:url';

export type KnobCategory = 'server' | 'engine' | 'kernels (A/B)';

export interface Knob<T> {
  readonly category: KnobCategory;
  readonly doc: string;
  readonly defaultText: string;
  readonly default: T;
  /** The value of a set variable; throws a message (without the name) where it does not parse. */
  parse(raw: string): T;
  /** Set but empty is an error, not the default (a key that would silently turn auth off). */
  readonly emptyIsError?: boolean;
}

export class KnobError extends Error {}

function bool(category: KnobCategory, fallback: boolean, doc: string): Knob<boolean> {
  return { category, doc, default: fallback, defaultText: fallback ? '1' : '0', parse: (raw) => {
    if (raw === '1' || raw === 'true') return true;
    if (raw === '0' || raw === 'false') return false;
    throw new Error('expected 0 or 1');
  } };
}

/** A number at least `min` (Infinity where `infinite`, integers only where `integer`). */
function num(category: KnobCategory, fallback: number, doc: string,
  o: { min?: number; integer?: boolean; infinite?: boolean } = {}): Knob<number> {
  const min = o.min ?? 0;
  return { category, doc, default: fallback, defaultText: String(fallback), parse: (raw) => {
    const v = raw.trim() === '' ? NaN : Number(raw);
    const ok = (o.infinite && v === Infinity) || (Number.isFinite(v) && (!o.integer || Number.isInteger(v)));
    if (!ok || v < min) {
      throw new Error(`expected ${o.integer === false ? 'a number' : 'an integer'} >= ${min}${o.infinite ? ' or Infinity' : ''}`);
    }
    return v;
  } };
}

function str(category: KnobCategory, doc: string, check?: (raw: string) => void,
  emptyIsError = false): Knob<string | undefined> {
  return { category, doc, default: undefined, defaultText: 'unset', emptyIsError, parse: (raw) => {
    check?.(raw);
    return raw;
  } };
}

function oneOf<const V extends string>(category: KnobCategory, values: readonly V[], fallback: V, doc: string,
  aliases: Record<string, V> = {}): Knob<V> {
  return { category, doc, default: fallback, defaultText: fallback, parse: (raw) => {
    const v = (values as readonly string[]).includes(raw) ? raw as V : aliases[raw];
    if (v === undefined) throw new Error(`expected ${values.join(' or ')}`);
    return v;
  } };
}

const K = 'kernels (A/B)' as const;

export const KNOBS = {
  QUIRE_API_KEY: str('server', 'The API key clients must send (as --api-key, which wins); set, it may not be empty.',
    undefined, true),
  QUIRE_ALLOW_LONG_MAX_MODEL_LEN: bool('engine', false,
    'Allows a --max-model-len past the model\'s context (max_position_embeddings as its RoPE scaling stretches it), as vLLM\'s VLLM_ALLOW_LONG_MAX_MODEL_LEN.'),
  QUIRE_TP_RANKS: oneOf('engine', ['process', 'thread'], 'process', 'How CUDA ranks 1..N-1 of tensor and pipeline parallelism run: a child process each, or a worker thread of the engine\'s (the CPU backend\'s ranks are always threads: they meet in shared memory).'),
  QUIRE_PP_LAYER_PARTITION: str('engine', 'Layers each pipeline stage holds, comma-separated, stage 0 first (as vLLM\'s VLLM_PP_LAYER_PARTITION: "8,12,12"); unset, as even as vLLM makes them, the layers left over to the stages before the last.',
    (raw) => {
      if (!/^\s*\d+(\s*,\s*\d+)*\s*$/.test(raw)) throw new Error('expected comma-separated layer counts, such as 8,12,12');
    }),
  QUIRE_PP_MICRO_BATCHES: num('engine', 0, 'Steps a pipeline-parallel engine keeps in flight, each of other requests, so each stage works on one (0: as many as the stages; 1: one step at a time through the stages, each idle while the others work).', { integer: true, min: 0 }),
  QUIRE_NODE_TIMEOUT_S: num('engine', 300, 'Seconds node 0 waits for the other nodes of --nnodes to join, and each other node for node 0 to answer.', { min: 1 }),
  QUIRE_CACHE_DIR: str('engine', 'Where compiled kernels are cached (default ~/.cache/quire/kernels).'),
  QUIRE_KERNEL_DEFINES: str(K, '`NAME=integer,...` prepended to every kernel source as #defines, to run compile-time variants side by side.',
    (raw) => {
      for (const d of raw.split(',').filter((x) => x.trim() !== '')) {
        if (!/^\s*[A-Z_][A-Z0-9_]*=-?\d+\s*$/.test(d)) throw new Error(`"${d}" is not NAME=integer`);
      }
    }),
  QUIRE_PDL: bool(K, true, 'Programmatic dependent launch on sm_90+ (0: every kernel waits for the one before it).'),
  QUIRE_CUBLAS_SINGLE_CHAIN_FROM: num(K, 128, 'Rows from which cuBLASLt sums K in one chain (no split-K; Infinity: never).',
    { integer: true, min: 1, infinite: true }),
  QUIRE_CUBLAS_TUNE_UP_TO: num(K, 0, 'Most rows of a single-chain bf16 GEMM shape (from 128 rows, a multiple of 8: the decode graphs\' buckets) that times cuBLASLt\'s first 8 single-chain candidates of the first\'s bits on its first eager run and keeps the fastest (backend/cuda/gemm-tune.ts). 0: never, the heuristic\'s first. Stays 0 (session 47, H200, one call each): W1 unchanged on qwen3-0.6b, qwen3-30b-a3b and qwen3.5-27b, while start-up to /health took 6 s (a3b) and 11 s (27b) longer.', { integer: true, min: 0 }),
  QUIRE_MOE_COMBINE_BATCH: num(K, 1, 'A MoE row\'s expert outputs the combine reads at once before summing them in order (1: one at a time; the same bits at any value; 8 measured no faster on qwen3-30b-a3b, an A/B knob).', { integer: true, min: 1 }),
  QUIRE_MOE_WGMMA_MIN_ROWS: num(K, 32, 'Rows an expert (tokens x top-k / experts) from which a bf16 MoE layer runs its grouped GEMMs on Hopper\'s wgmma (kernels/moe_wgmma.cu; sm_90 only, never batch-invariant; 0: never). 32: where it overtook the plan\'s split builds on qwen3-30b-a3b\'s and Mixtral\'s shapes (session 41); on a3b the 64 x 32 tiles still beat it at 32 rows (0.432 against 0.497 ms, session 43).',
    { integer: true, min: 0 }),
  QUIRE_MOE_TILED_FROM_ROWS: num(K, 8, 'Rows an expert from which bf16 experts under the wgmma threshold take gemm_rows\' 64 x 32 tiles (tiled_w2x2_m2_n2) instead of its split builds (0: never; the same bits). One qwen3-30b-a3b layer (bench-moe, session 43): 0.390 -> 0.347 ms at 8 rows, 0.474 -> 0.338 at 16. In the engine against 0: W1 5,059.9 -> 5,499.9 output tok/s, decode at 128 / 256 rows +9.5% / +27.5% (session 44).',
    { integer: true, min: 0 }),
  QUIRE_MOE_TILED_FROM_ROWS_FP8: num(K, 8, 'The same for block-FP8 experts (their _fp8 builds; no wgmma path, so at every row count where gemm_rows would split). bench-moe --fp8 on one qwen3-30b-a3b layer (session 45): default -> tiled 0.367 -> 0.299 ms at 128 tokens (8 rows an expert), 0.478 -> 0.304 at 256, 0.662 -> 0.415 at 512, 1.095 -> 0.676 at 1,024, the same digests; under 8 rows the split builds were as fast or faster. Not yet A/B-tested in the engine.',
    { integer: true, min: 0 }),
  QUIRE_MOE_FUSED_ROUTER_MAX_ROWS: num(K, 0, 'Most rows a MoE layer routes in one fused kernel (router GEMM, route, group; 0, the default: never; measured slower).',
    { integer: true, min: 0 }),
  QUIRE_CHAIN_GEMM: bool(K, true, 'GEMMs of up to 8 tokens on the chain kernels (0: cuBLASLt).'),
  QUIRE_CHAIN_NORM: bool(K, true, 'RMSNorms inside the chain GEMMs at hidden >= 1,024 (0: the norm kernel).'),
  QUIRE_CHAIN_SILU: oneOf(K, ['pairs', 'none'], 'pairs', 'How the bf16 chain applies silu_mul to gate_up (none: a separate kernel).', { '0': 'none' }),
  QUIRE_CHAIN_SILU_FP8: oneOf(K, ['pairs', 'none'], 'pairs', 'The same for block-FP8 weights.', { '0': 'none' }),
  QUIRE_CHAIN_SPLIT_K: num(K, 1024, 'K from which bf16 chains split each tile\'s k between two warps (Infinity: never).', { infinite: true }),
  QUIRE_GGUF_BLOCKS: bool(K, true, 'A GGUF file\'s quantized projections stay llama.cpp\'s blocks on the cuda backend (0: dequantized to bf16 at load).'),
  QUIRE_GGUF_GEMV_TOKENS: num(K, 8, 'The most tokens a GGUF-quantized GEMM runs on kernels/gguf.cu\'s GEMV (in passes of 8, each reading the blocks once); more dequantize the weight to bf16 for the bf16 GEMM (its blocks read, 2 bytes a weight written and read back: ~7 passes\' bytes at Q4_K). 8: batch 16 of an 8B Q4_K_M model ran 1517 tokens/s dequantized against 1288 on two GEMV passes (session 35, H200).', { integer: true }),
  QUIRE_GGUF_GEMV_SPLIT: oneOf(K, ['auto', '1', '2', '4'], 'auto', 'Warps of a GGUF GEMV block that share each of its weight rows, splitting the row\'s pieces (auto: chosen per segment from its rows and K, gguf-gemv-plan.ts).', { '0': 'auto' }),
  QUIRE_GGUF_DEQUANT_MIB: num(K, 256, 'MiB of bf16 scratch a GGUF weight is dequantized into for larger steps (a bigger weight goes in slices of rows).', { min: 1 }),
  QUIRE_FP8_SPLIT_K: num(K, 8192, 'K from which FP8 chains split k (Infinity: never).', { infinite: true }),
  QUIRE_CHAIN_SHORT_RING: bool(K, true, 'A bf16 chain split between two warps whose _p8 build (16-stage rings, 96 KiB blocks) would take two waves of blocks runs the _s2 build of 8-stage rings (48 KiB, one wave) instead of unsplit (0: unsplit, cuBLASLt\'s bits): qwen3.5-27b\'s down, o and out_proj (320 tiles), qwen3-8b\'s qkv (384), whose decode it made 3.0% faster at batch 1 and 6.6% at 8 (session 43). The split\'s own bits.'),
  QUIRE_CHAIN_WHOLE: num(K, 8, 'The most tokens gemm_chain_whole takes on narrow weights.', { integer: true }),
  QUIRE_CHAIN_WHOLE_SPLIT: num(K, 8, 'Stages a slice of gemm_chain_whole\'s k holds beyond 16 (0: unsplit).', { integer: true }),
  QUIRE_CHAIN_EARLY8_K: num(K, 4096, 'K from which the split bf16 rings read 6 of 8 stages before the wait.', { integer: true }),
  QUIRE_FUSED_ROPE: bool(K, true, 'A decode step\'s qk-norm + rope + KV write inside the decode attention kernel.'),
  QUIRE_DELTANET_FUSED_NORM: bool(K, false, 'A DeltaNet layer\'s rule and gated RMSNorm in one launch on decode steps (kernels/deltanet_fused.cuh deltanet_recurrent_norm: a block per sequence and v head, the norm on its row in shared memory; the same bits). Off until measured: session 45 timed the separate norm at 5.2 us a layer alone on qwen3.5-27b at batch 1, 1.6% of the step.'),
  QUIRE_DELTANET_CHUNK: oneOf(K, ['64', '32'], '32', 'Tokens a chunk of the chunked DeltaNet rule (QUIRE_DELTANET_CHUNKED_FROM; kernels/deltanet_chunked.cu): 64 takes 132,864 bytes of shared memory a block at Dk 128 (a block a SM), 32 takes 69,504 (half the q.k and k.k products a token, twice the chunks in turn). Session 48 (H200, one qwen3.5-27b layer): a lone 512-token chunk 0.386 ms in chunks of 32, 0.551 in chunks of 64; 4,096 tokens 2.98 against 4.60.'),
  QUIRE_DELTANET_CHUNKED_MMA: bool(K, false, 'The chunked DeltaNet rule\'s q.k, k.k, S^T k, S^T q products and its state update on tensor cores (deltanet_chunked\'s _mma build: bf16 mma.sync with f32 sums; q and k as they came, bf16 values, so exact products, their norms applied after; the state, and the update\'s w kn D, each as two bf16 parts, within 2^-17 of it), the forward substitution and the outputs on CUDA cores as the plain build. 72,320 bytes of shared memory a block at Dk 128 and chunks of 32 (no f32 copies of q and k; three blocks a SM, 80 registers). Off until measured: those products are 95% of the plain build\'s FMAs.'),
  QUIRE_DELTANET_CHUNKED_FROM: num(K, 64, 'Fewest tokens of a sequence of a step whose DeltaNet rule runs in chunks of QUIRE_DELTANET_CHUNK tokens (kernels/deltanet_chunked.cu: the products within a chunk shared by a block, the chunks in turn), not token after token; within rounding of the recurrence, not its bits, so a prompt split otherwise (a prefix-cache hit, another token budget) can differ in the last bits from one run token by token (batch-invariant mode, which promises those bits, leaves it off). 0: never. Session 48 (H200, qwen3.5-27b, chunks of 32): a lone 512-token chunk 0.386 ms a layer against the recurrence\'s 0.713 (4,096 tokens: 2.98 against 6.15); W1 2,298.4 output tok/s against 2,243.1, prefill 32 x 2,048 9,449 prompt tok/s against 9,189.', { integer: true, min: 0 }),
  QUIRE_DELTANET_ONE_LAUNCH: bool(K, true, 'A mixed step\'s DeltaNet rule (sequences both within and past QUIRE_DELTANET_WIDE_MAX_TOKENS) in one launch of deltanet_recurrent_mixed (kernels/deltanet_wide.cuh: each block takes the wide build\'s path or deltanet_recurrent\'s by its sequence; their bits), not two whose second waits for the first. Session 48 (H200): 160 decode rows beside a 512-token chunk 1.18 ms a layer against 1.47 as two launches; W1 qwen3.5-27b 2,222.5 output tok/s against 2,171.1.'),
  QUIRE_DELTANET_WIDE_MAX_TOKENS: num(K, 1, 'Most tokens a sequence of a step whose DeltaNet rule runs on deltanet_recurrent_wide (kernels/deltanet_wide.cuh): deltanet_recurrent\'s bits, each load 128 contiguous bytes of a state row where deltanet_recurrent reads 32 of each of 4 rows; the step\'s longer sequences on deltanet_recurrent (two launches in a mixed step). 1 (decode rows) since session 47 (H200, qwen3.5-27b, one call): decode at 160 rows of 512 tokens 4,233.8 tok/s against 2,211.3 with 0; W1 2,099.9 against 1,547.2 (with the cuBLASLt tuner, which alone moved nothing). 0: deltanet_recurrent alone. Larger: prompt chunks too, unmeasured (two block barriers a token).', { integer: true, min: 0 }),
  QUIRE_DELTANET_FUSED_DECODE: bool(K, false, 'A DeltaNet layer\'s conv, rule and gated RMSNorm in one launch on decode steps (kernels/deltanet_fused.cuh deltanet_decode: the conv of the channels a (sequence, v head) reads in shared memory, the q/k windows a key head\'s blocks share written by the last to read them; the same bits). Off until measured: session 45 timed the conv and the norm at 3.7 and 5.2 us a layer alone on qwen3.5-27b at batch 1.'),
  QUIRE_VERIFY_DECODE_MAX_SEQS: num(K, 0, 'Speculative verify steps of up to this many sequences, each row at most 16 tokens, attend on the decode kernel, a row per token with its context split over blocks, instead of the prefill kernel\'s block a head (0: never; their own bits, in the default mode only). Not yet measured: session 45 found an n-gram verify step of the 208M demo target at twice a plain step\'s time.',
    { integer: true, min: 0 }),
  QUIRE_SPEC_HEAD_GRAPHS: bool(K, false, 'An MTP or EAGLE-3 head\'s chained one-token forwards replay CUDA graphs, one per batch-size bucket, captured at start-up (0: eager, each a launch per kernel and a wait). Off until its GPU test has run and it is measured against eager.'),
  QUIRE_DRAFT_CHAIN: bool(K, false, 'A draft model\'s proposal forwards launched back to back, each reading the token before it on the device (not yet measured).'),
  QUIRE_DECODE_SPLIT_TOKENS: num(K, 1024, 'KV positions a decode split covers.', { integer: true, min: 1 }),
  QUIRE_DECODE_LONG_SPLIT_TOKENS: num(K, 256, 'KV positions a split covers for rows of long contexts in small steps.', { integer: true, min: 1 }),
  QUIRE_DECODE_MAX_SPLITS: num(K, 16, 'Most splits of one decode row (also the stride of the split-state buffers, whose bytes grow with it).', { integer: true, min: 1 }),
  QUIRE_DECODE_MMA_MAX_SPLITS: num(K, 32, 'Most splits of one decode row on the _mma builds (QUIRE_DECODE_MMA) in a grid that QUIRE_DECODE_MAX_SPLITS would leave under one block a SM (a lone long stream); larger grids keep QUIRE_DECODE_MAX_SPLITS. The _mma bits are their own, so their split plan may differ from the CUDA-core kernel\'s; the split-state buffers grow to the larger cap. 32 against 16: qwen3-8b alone +4.1% at 16k and +8.5% at 32k of context; with 8 rows at 16k, where it applied to every grid then, -4.8% (session 44).', { integer: true, min: 1 }),
  QUIRE_DECODE_FOLD_BATCH: num(K, 8, 'Published decode split states a fold reads at once before folding them in order; above 1, blocks of several heads also fold them a warp a head (1: one state and one head at a time; the same bits at any value; 8 measured 2-5% faster on long single streams).', { integer: true, min: 1 }),
  QUIRE_DECODE_HEAD_GROUPS: oneOf(K, ['1', '4'], '1', 'Query heads a decode block of one head each serves side by side (4: the _hg4 builds, whose K and V loads meet in L1; 1: none; the same bits; 4 measured 1-5% slower on qwen3-8b, an A/B knob).'),
  QUIRE_DECODE_GROUP_FILL: num(K, 4, 'Blocks per SM that a decode grid of whole GQA groups, counting its rows\' splits, must reach to keep whole groups when its rows alone are too few (0: rows alone decide), on the CUDA-core kernel.', { min: 0 }),
  QUIRE_DECODE_MMA_GROUP_FILL: num(K, 0.9, 'The same for a whole group the _mma builds serve (QUIRE_DECODE_MMA): their walk reads each K and V once for the group on tensor cores, so fewer blocks suffice. 0.9: qwen3-8b alone at 16k and 32k of context (8 kv heads x 16 splits, 128 blocks) +7% and +14%, qwen3-30b-a3b at batch 8 and 2k +15%, against G 1 (session 43).', { min: 0 }),
  QUIRE_DECODE_SHORT_SPLIT_TOKENS: num(K, 128, 'KV positions a split covers for short rows (0: none).', { integer: true }),
  QUIRE_GRAPH_KV_CLASSES: bool(K, true, 'Decode graphs per KV-length class (short and long rows).'),
  QUIRE_DECODE_ODD_ROWS: num(K, 192, 'Rows from which odd GQA groups (5, 6, 7) take their own decode builds.', { integer: true }),
  QUIRE_DECODE_MMA: oneOf(K, ['off', 'groups', 'all'], 'groups', 'Decode attention\'s rounds on tensor cores (kernels/attention_decode_mma.cuh: a GQA group\'s query heads as the MMA\'s rows; bf16 caches of head dim 64 or 128), with their own bits. off (0): never; groups: where a block serves 4 or more query heads (a row\'s bits then follow whether its step\'s grid did; --batch-invariant takes off); all (1): every grid, batch-invariant as the CUDA-core kernel. groups against off (session 43): qwen3-30b-a3b (G 8) W1 +29%, batch 32 and 64 at 2k +31% and +39%; qwen3-8b (G 4) batch 64 at 4k +16%. At G 1 and 2 the MMA lost 7-13% (session 42), so groups leaves them on CUDA cores.', { '0': 'off', '1': 'all' }),
  QUIRE_DECODE_GROUPS: str(K, 'Comma-separated G values the decode kernel may use (default all built).', (raw) => {
    if (!/^\d+(,\d+)*$/.test(raw)) throw new Error('expected a comma-separated list of integers');
  }),
  QUIRE_DECODE_WIDE_BLOCKS: num(K, 8, 'Blocks per SM beyond which G <= 2 decode grids take the _w builds.', { integer: true }),
  QUIRE_DECODE_PREFETCH: bool(K, true, 'The _pre decode builds (K and V asked of L2 before the wait) for small grids.'),
  QUIRE_DECODE_CLUSTER: bool(K, true, 'Clusters fold a _pre row\'s splits in shared memory.'),
} as const satisfies Record<`QUIRE_${string}`, Knob<unknown>>;

export type KnobName = keyof typeof KNOBS;
type ValueOf<N extends KnobName> = (typeof KNOBS)[N]['default'] | ReturnType<(typeof KNOBS)[N]['parse']>;

/**
 * A knob's value: the variable's, parsed, or the default where it is unset or empty. Read where it is used, not
 * cached (tests set a knob, then build a backend); hot paths read theirs once, at load.
 */
export function readKnob<N extends KnobName>(name: N, env: NodeJS.ProcessEnv = process.env): ValueOf<N> {
  const knob: Knob<unknown> = KNOBS[name];
  const raw = env[name];
  let value: unknown = knob.default;
  if (raw === '' && knob.emptyIsError) throw new KnobError(`${name} is set but empty (${knob.doc})`);
  if (raw !== undefined && raw !== '') {
    try {
      value = knob.parse(raw);
    } catch (e) {
      throw new KnobError(`${name}=${raw}: ${(e as Error).message} (${knob.doc})`);
    }
  }
  return value as ValueOf<N>;
}

/** Every problem with the QUIRE_* variables of `env`: a value that does not parse, a name no knob has. */
export function checkKnobs(env: NodeJS.ProcessEnv = process.env): { errors: string[]; warnings: string[] } {
  const errors: string[] = [];
  const warnings: string[] = [];
  for (const name of Object.keys(env).filter((n) => n.startsWith('QUIRE_')).sort()) {
    if (!(name in KNOBS)) {
      warnings.push(`${name} is set but is no Quire variable (docs/knobs.md lists them); it is ignored`);
      continue;
    }
    try {
      readKnob(name as KnobName, { [name]: env[name] });
    } catch (e) {
      errors.push((e as Error).message);
    }
  }
  return { errors, warnings };
}

/** docs/knobs.md. */
export function knobsMarkdown(): string {
  const lines = ['# Environment variables', '',
    'Generated from `src/knobs/knobs.ts` (the one place they are declared); a bad value stops start-up naming it.',
    'Server and engine settings have flags too; the kernel switches exist for A/B runs (docs/perf-log.md).', ''];
  for (const category of ['server', 'engine', 'kernels (A/B)'] as const) {
    lines.push(`## ${category}`, '', '| variable | default | what it does |', '|---|---|---|');
    for (const [name, k] of Object.entries(KNOBS) as [string, Knob<unknown>][]) {
      if (k.category === category) lines.push(`| \`${name}\` | ${k.defaultText} | ${k.doc.replaceAll('|', '\\|')} |`);
    }
    lines.push('');
  }
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) process.stdout.write(knobsMarkdown());
