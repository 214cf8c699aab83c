// Typed table of cuBLASLt and the one GEMM the model needs:
//   y[T, N] = x[T, K] * w[N, K]^T, bf16 in and out, fp32 compute;
// or, for block-FP8 weights, e4m3 x and w with their block scales in, bf16 out (runFp8).
//
// Row-major buffers seen column-major:
//   x (row-major T x K) = column-major K x T, ld K     -> B, op N
//   w (row-major N x K) = column-major K x N, ld K     -> A, op T
//   y (row-major T x N) = column-major N x T, ld N     -> D = A^T B  (m = N, n = T, k = K)

import koffi from 'koffi';
import { loadLibrary } from './discover.js';
import type { Handle } from './driver.js';

type Out<T> = [T];

export const CUDA_R_32F = 0;
export const CUDA_R_16BF = 14;
export const CUDA_R_8F_E4M3 = 28;
export const CUBLAS_COMPUTE_32F = 68;
export const CUBLAS_OP_N = 0;
export const CUBLAS_OP_T = 1;
export const CUBLASLT_MATMUL_DESC_TRANSA = 3;
export const CUBLASLT_MATMUL_DESC_TRANSB = 4;
export const CUBLASLT_MATMUL_DESC_EPILOGUE = 7;
export const CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8;
export const CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17;
export const CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18;
export const CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31;
export const CUBLASLT_MATMUL_DESC_B_SCALE_MODE = 32;
/** One f32 scale per 128 elements along K (cuBLAS 12.9+, sm_90). */
export const CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F = 4;
/** One f32 scale per 128 x 128 block (cuBLAS 12.9+, sm_90). */
export const CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F = 5;
export const CUBLASLT_EPILOGUE_BIAS = 4;
export const CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;
/** Which split-K reduction schemes the heuristic may return (uint32 mask; 0: none, every sum over K in one chain). */
export const CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3;
export const CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2;
export const CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME = 3;
/** sizeof(cublasLtMatmulHeuristicResult_t): algo (64) + workspaceSize (8) + state (4) + wavesCount (4) + reserved (16). */
export const HEURISTIC_RESULT_BYTES = 96;
/** Rows from which bf16 GEMMs sum K in one chain (Gemm's singleChainFrom). */
export const SINGLE_CHAIN_MIN_TOKENS = 128;
export const ALGO_BYTES = 64;

export interface CublasLtApi {
  cublasLtCreate(handle: Out<Handle | null>): number;
  cublasLtDestroy(handle: Handle): number;
  cublasLtGetStatusName(status: number): string;
  cublasLtMatmulDescCreate(desc: Out<Handle | null>, computeType: number, scaleType: number): number;
  cublasLtMatmulDescSetAttribute(desc: Handle, attr: number, buf: ArrayBufferView, size: number): number;
  cublasLtMatmulDescDestroy(desc: Handle): number;
  cublasLtMatrixLayoutCreate(layout: Out<Handle | null>, type: number, rows: number, cols: number, ld: number): number;
  cublasLtMatrixLayoutDestroy(layout: Handle): number;
  cublasLtMatmulPreferenceCreate(pref: Out<Handle | null>): number;
  cublasLtMatmulPreferenceSetAttribute(pref: Handle, attr: number, buf: ArrayBufferView, size: number): number;
  cublasLtMatmulPreferenceDestroy(pref: Handle): number;
  cublasLtMatmulAlgoGetHeuristic(handle: Handle, desc: Handle, a: Handle, b: Handle, c: Handle, d: Handle,
    pref: Handle, requested: number, results: Uint8Array, numReturned: Out<number>): number;
  cublasLtMatmul(handle: Handle, desc: Handle, alpha: Float32Array, a: bigint, aLayout: Handle, b: bigint,
    bLayout: Handle, beta: Float32Array, c: bigint, cLayout: Handle, d: bigint, dLayout: Handle,
    algo: Uint8Array, workspace: bigint, workspaceBytes: number, stream: Handle): number;
  cublasLtMatmulAlgoConfigGetAttribute(algo: Uint8Array, attr: number, buf: Uint32Array, size: number,
    written: Out<number>): number;
}

const PROTOTYPES = [
  'int cublasLtCreate(_Out_ void **handle)',
  'int cublasLtDestroy(void *handle)',
  'const char *cublasLtGetStatusName(int status)',
  'int cublasLtMatmulDescCreate(_Out_ void **desc, int computeType, int scaleType)',
  'int cublasLtMatmulDescSetAttribute(void *desc, int attr, const void *buf, size_t size)',
  'int cublasLtMatmulDescDestroy(void *desc)',
  'int cublasLtMatrixLayoutCreate(_Out_ void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld)',
  'int cublasLtMatrixLayoutDestroy(void *layout)',
  'int cublasLtMatmulPreferenceCreate(_Out_ void **pref)',
  'int cublasLtMatmulPreferenceSetAttribute(void *pref, int attr, const void *buf, size_t size)',
  'int cublasLtMatmulPreferenceDestroy(void *pref)',
  'int cublasLtMatmulAlgoGetHeuristic(void *handle, void *desc, void *a, void *b, void *c, void *d, ' +
    'void *pref, int requested, _Out_ uint8_t *results, _Out_ int *numReturned)',
  'int cublasLtMatmul(void *handle, void *desc, const void *alpha, uint64_t a, void *aLayout, ' +
    'uint64_t b, void *bLayout, const void *beta, uint64_t c, void *cLayout, uint64_t d, void *dLayout, ' +
    'const void *algo, uint64_t workspace, size_t workspaceBytes, void *stream)',
  'int cublasLtMatmulAlgoConfigGetAttribute(const uint8_t *algo, int attr, _Out_ uint32_t *buf, size_t size, ' +
    '_Out_ size_t *written)',
];

let cublasLt: CublasLtApi | null = null;

export function cublasLtApi(): CublasLtApi {
  if (cublasLt) return cublasLt;
  const lib = loadLibrary('cublasLt', (path) => koffi.load(path));
  const table: Record<string, unknown> = {};
  for (const proto of PROTOTYPES) table[/(\w+)\(/.exec(proto)![1]!] = lib.func(proto);
  cublasLt = table as unknown as CublasLtApi;
  return cublasLt;
}

export class CublasError extends Error {
  constructor(readonly call: string, readonly status: number, statusName: string) {
    super(`${call} failed: ${statusName} (${status})`);
    this.name = 'CublasError';
  }
}

export function checkCublas(status: number, call: string): void {
  if (status !== 0) throw new CublasError(call, status, cublasLtApi().cublasLtGetStatusName(status));
}

function created(fn: (out: Out<Handle | null>) => number, call: string): Handle {
  const out: Out<Handle | null> = [null];
  checkCublas(fn(out), call);
  return BigInt(out[0]!);
}

interface GemmPlan {
  a: Handle;
  b: Handle;
  d: Handle;
  algo: Uint8Array;
}

/** How a Gemm picks among its single-chain candidates (gemm-tune.ts); without one, the heuristic's first. */
export interface GemmTuner {
  /** Most rows a tuned shape has; larger steps are compute-bound enough for the heuristic's first. */
  readonly upToRows: number;
  /**
   * Index of the fastest of `launches` whose `output` bits equal the first's, or 0 where it cannot time them now (the
   * stream is being captured).
   */
  fastest(launches: readonly (() => void)[], output: { ptr: bigint; bytes: number }): number;
}

/** Single-chain candidates a tuned shape times. */
const TUNE_CANDIDATES = 8;
/** Row counts a Gemm tunes are multiples of this (graph-buckets.ts: buckets of 8 past 8 rows). */
export const TUNE_ROW_STEP = 8;

/**
 * bf16 GEMMs y = x w^T (+ a bias per output column of w, added in fp32 before the rounding: the BIAS epilogue) on one
 * stream, with layouts and heuristic algo cached per (T, N, K, bias or not).
 *
 * bf16 GEMMs of `singleChainFrom` rows and more (SINGLE_CHAIN_MIN_TOKENS) take no split-K algorithm: each
 * output is then one chain of MMAs over K in order, whatever tile or stage count the heuristic picks on a given GPU,
 * so their bits are the same on every Hopper part (an H200's heuristic split K 12,288 at 256 rows where an H100's did
 * not) and equal the chain kernels' (the decode GEMMs of up to 8 tokens, kernels/gemm_chain.cu). Not every
 * single-chain algorithm sums in that order: one of the 8 candidates at qwen3.5-27b's down (N 5120, K 17408, 128 rows)
 * differed in the last bit of some outputs (session 46, H200), so the tuner below compares bits before it times.
 * Fewer rows keep the heuristic's split-K, whose speed W1's shrinking tail steps need (docs/perf-log.md, session 27);
 * a shape no single-chain algorithm serves takes the heuristic's first (cublas-split.test.ts checks the benchmarked
 * shapes).
 * With a `tuner`, a single-chain shape of up to tuner.upToRows rows, a multiple of TUNE_ROW_STEP, takes the fastest
 * of the heuristic's first TUNE_CANDIDATES single-chain algorithms that give the first's bits, timed on its first
 * eager run (gemm-tune.ts).
 */
export class Gemm {
  private readonly api = cublasLtApi();
  private readonly handle: Handle;
  private readonly desc: Handle;
  /** The same, with the BIAS epilogue (its bias pointer set before each call). */
  private readonly biasDesc: Handle;
  private readonly biasPointer = new BigUint64Array(1);
  /** Block-FP8 weights (A: a scale per 128 x 128 block) times FP8 activations (B: a scale per token and 128 k). */
  private fp8DescHandle: Handle | null = null;
  private readonly scalePointer = new BigUint64Array(1);
  /** The heuristic's preferences: any algorithm within the workspace. */
  private readonly pref: Handle;
  /** The same, no split-K (bf16 GEMMs from singleChainFrom rows); null where that is Infinity. */
  private readonly singleChainPref: Handle | null = null;
  private readonly plans = new Map<string, GemmPlan>();
  private readonly alpha = new Float32Array([1]);
  private readonly beta = new Float32Array([0]);

  /**
   * fp8WeightScales: how runFp8 reads the weights' scales: 'block' (one per 128 x 128 block) or 'row' (one per row
   * and 128 k, VEC128_32F: the block scales repeated on each of their rows).
   */
  constructor(private readonly workspace: bigint, private readonly workspaceBytes: number,
    readonly fp8WeightScales: 'block' | 'row' = 'block', private readonly singleChainFrom = SINGLE_CHAIN_MIN_TOKENS,
    private readonly tuner: GemmTuner | null = null) {
    this.handle = created((o) => this.api.cublasLtCreate(o), 'cublasLtCreate');
    this.desc = created((o) => this.api.cublasLtMatmulDescCreate(o, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      'cublasLtMatmulDescCreate');
    this.biasDesc = created((o) => this.api.cublasLtMatmulDescCreate(o, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      'cublasLtMatmulDescCreate');
    for (const desc of [this.desc, this.biasDesc]) {
      this.setDesc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
      this.setDesc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    }
    this.setDesc(this.biasDesc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    const preference = (): Handle => {
      const pref = created((o) => this.api.cublasLtMatmulPreferenceCreate(o), 'cublasLtMatmulPreferenceCreate');
      checkCublas(this.api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        new BigUint64Array([BigInt(workspaceBytes)]), 8), 'cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)');
      return pref;
    };
    this.pref = preference();
    if (Number.isFinite(singleChainFrom)) {
      this.singleChainPref = preference();
      checkCublas(this.api.cublasLtMatmulPreferenceSetAttribute(this.singleChainPref,
        CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, new Uint32Array([0]), 4),
      'cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)');
    }
  }

  /** The split-K count and reduction scheme of the algorithm cached for a bf16 GEMM (probes and tests). */
  splitOf(T: number, N: number, K: number): { splitK: number; reductionScheme: number } {
    return this.splitOfAlgo(this.plan(T, N, K, this.desc).algo);
  }

  /**
   * Up to `max` of the heuristic's bf16 algorithms (no bias) for (T, N, K), in its order, with its wave estimate:
   * `singleChain` asks for those that sum K in one chain. For lab/bench-gemm.ts, which times each with runAlgo.
   */
  candidates(T: number, N: number, K: number, singleChain: boolean, max = 8): { algo: Uint8Array; waves: number;
    splitK: number }[] {
    const plan = this.plan(T, N, K, this.desc);
    const pref = singleChain ? this.singleChainPref ?? this.pref : this.pref;
    const found = this.heuristics(this.desc, plan, pref, max);
    if (found === null) {
      throw new CublasError(`cublasLtMatmulAlgoGetHeuristic(T=${T}, N=${N}, K=${K}, ${max})`, 15, 'NO_ALGORITHM');
    }
    return found.map((c) => ({ ...c, splitK: this.splitOfAlgo(c.algo).splitK }));
  }

  /** Up to `max` usable algorithms of the heuristic's, in its order; null where it fails. */
  private heuristics(desc: Handle, { a, b, d }: Omit<GemmPlan, 'algo'>, pref: Handle, max: number):
    { algo: Uint8Array; waves: number }[] | null {
    const results = new Uint8Array(HEURISTIC_RESULT_BYTES * max);
    const numReturned: Out<number> = [0];
    if (this.api.cublasLtMatmulAlgoGetHeuristic(this.handle, desc, a, b, d, d, pref, max, results, numReturned) !== 0) {
      return null;
    }
    const view = new DataView(results.buffer);
    return Array.from({ length: numReturned[0] }, (_, i) => i * HEURISTIC_RESULT_BYTES)
      .filter((o) => view.getInt32(o + 72, true) === 0)  // state: CUBLAS_STATUS_SUCCESS
      .map((o) => ({ algo: results.slice(o, o + ALGO_BYTES), waves: view.getFloat32(o + 76, true) }));
  }

  /** y[T, N] = x[T, K] * w[N, K]^T on `algo` (one of candidates'). */
  runAlgo(algo: Uint8Array, x: bigint, w: bigint, y: bigint, T: number, N: number, K: number, stream: Handle): void {
    const p = this.plan(T, N, K, this.desc);
    checkCublas(this.api.cublasLtMatmul(this.handle, this.desc, this.alpha, w, p.a, x, p.b, this.beta, y, p.d, y, p.d,
      algo, this.workspace, this.workspaceBytes, stream), `cublasLtMatmul(T=${T}, N=${N}, K=${K})`);
  }

  private splitOfAlgo(algo: Uint8Array): { splitK: number; reductionScheme: number } {
    const read = (attr: number): number => {
      const buf = new Uint32Array(1);
      const written: Out<number> = [0];
      checkCublas(this.api.cublasLtMatmulAlgoConfigGetAttribute(algo, attr, buf, 4, written),
        `cublasLtMatmulAlgoConfigGetAttribute(${attr})`);
      return buf[0]!;
    };
    return { splitK: read(CUBLASLT_ALGO_CONFIG_SPLITK_NUM), reductionScheme: read(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) };
  }

  private setDesc(desc: Handle, attr: number, value: number): void {
    checkCublas(this.api.cublasLtMatmulDescSetAttribute(desc, attr, new Int32Array([value]), 4),
      `cublasLtMatmulDescSetAttribute(${attr})`);
  }

  private layout(rows: number, cols: number, ld: number, type = CUDA_R_16BF): Handle {
    return created((o) => this.api.cublasLtMatrixLayoutCreate(o, type, rows, cols, ld),
      'cublasLtMatrixLayoutCreate');
  }

  private plan(T: number, N: number, K: number, desc: Handle,
    run?: { x: bigint; w: bigint; y: bigint; stream: Handle }): GemmPlan {
    const kind = desc === this.biasDesc ? 'bias' : desc === this.fp8DescHandle ? 'fp8' : '';
    const key = `${T},${N},${K},${kind}`;
    const cached = this.plans.get(key);
    if (cached) return cached;
    const operand = kind === 'fp8' ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const a = this.layout(K, N, K, operand);
    const b = this.layout(K, T, K, operand);
    const d = this.layout(N, T, N);
    const results = new Uint8Array(HEURISTIC_RESULT_BYTES);
    const numReturned: Out<number> = [0];
    const ask = (pref: Handle): number => this.api.cublasLtMatmulAlgoGetHeuristic(this.handle, desc, a, b, d, d, pref, 1,
      results, numReturned);
    // block-FP8 GEMMs are gated by KL, not bits: any algorithm (the FP8 kernels of some shapes all split K)
    const single = kind !== 'fp8' && T >= this.singleChainFrom ? this.singleChainPref : null;
    const singleChain = single !== null && ask(single) === 0 && numReturned[0] >= 1;
    if (!singleChain) checkCublas(ask(this.pref), `cublasLtMatmulAlgoGetHeuristic(T=${T}, N=${N}, K=${K})`);
    if (numReturned[0] < 1) throw new CublasError(`cublasLtMatmulAlgoGetHeuristic(T=${T}, N=${N}, K=${K})`, 15, 'NO_ALGORITHM');
    let algo: Uint8Array = results.slice(0, ALGO_BYTES);
    // only row counts of multiples of TUNE_ROW_STEP (the decode graphs' buckets past 8): a mixed step's rows can take
    // any count, and each new one tuned would stall a step
    if (singleChain && run && this.tuner !== null && T <= this.tuner.upToRows && T % TUNE_ROW_STEP === 0) {
      const algos = this.heuristics(desc, { a, b, d }, single!, TUNE_CANDIDATES)?.map((c) => c.algo);
      if (algos) {
        const pick = this.tuner.fastest(algos.map((c) => () => checkCublas(this.api.cublasLtMatmul(this.handle, desc,
          this.alpha, run.w, a, run.x, b, this.beta, run.y, d, run.y, d, c, this.workspace, this.workspaceBytes,
          run.stream), `cublasLtMatmul(T=${T}, N=${N}, K=${K}, tuning)`)), { ptr: run.y, bytes: T * N * 2 });
        if (algos[pick]) algo = algos[pick];
      }
    }
    const plan = { a, b, d, algo };
    this.plans.set(key, plan);
    return plan;
  }

  private fp8DescOrCreate(): Handle {
    if (this.fp8DescHandle !== null) return this.fp8DescHandle;
    const desc = created((o) => this.api.cublasLtMatmulDescCreate(o, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      'cublasLtMatmulDescCreate');
    this.setDesc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    this.setDesc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    this.setDesc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, this.fp8WeightScales === 'block'
      ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    this.setDesc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    this.fp8DescHandle = desc;
    return desc;
  }

  /** The FP8 GEMM's layouts and algorithm for T tokens (exported for probes). */
  planFp8(T: number, N: number, K: number): GemmPlan {
    return this.plan(T, N, K, this.fp8DescOrCreate());
  }

  /**
   * y[T, N] (bf16) = block-FP8 w[N, K] (scales wScales [N / 128, K / 128] f32, row-major, rows padded to 16 bytes)
   * times FP8 activations xq[T, K] (scales xScales [K / 128, T] f32, row-major: tokens contiguous): cuBLASLt's
   * block-scaled FP8 GEMM (sm_90).
   */
  runFp8(xq: bigint, xScales: bigint, w: bigint, wScales: bigint, y: bigint, T: number, N: number, K: number,
    stream: Handle): void {
    const desc = this.fp8DescOrCreate();
    for (const [attr, p] of [[CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, wScales], [CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
      xScales]] as const) {
      this.scalePointer[0] = p;
      checkCublas(this.api.cublasLtMatmulDescSetAttribute(desc, attr, this.scalePointer, 8),
        `cublasLtMatmulDescSetAttribute(${attr})`);
    }
    const p = this.planFp8(T, N, K);
    checkCublas(this.api.cublasLtMatmul(this.handle, desc, this.alpha, w, p.a, xq, p.b, this.beta, y, p.d, y, p.d,
      p.algo, this.workspace, this.workspaceBytes, stream), `cublasLtMatmul(FP8, T=${T}, N=${N}, K=${K})`);
  }

  /** y[T, N] = x[T, K] * w[N, K]^T (+ bias[N] where `bias` is not 0) on `stream`. */
  run(x: bigint, w: bigint, y: bigint, T: number, N: number, K: number, stream: Handle, bias = 0n): void {
    const desc = bias === 0n ? this.desc : this.biasDesc;
    if (bias !== 0n) {
      this.biasPointer[0] = bias;
      checkCublas(this.api.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, this.biasPointer, 8),
        'cublasLtMatmulDescSetAttribute(BIAS_POINTER)');
    }
    const p = this.plan(T, N, K, desc, { x, w, y, stream });
    checkCublas(this.api.cublasLtMatmul(this.handle, desc, this.alpha, w, p.a, x, p.b, this.beta, y, p.d, y, p.d,
      p.algo, this.workspace, this.workspaceBytes, stream), `cublasLtMatmul(T=${T}, N=${N}, K=${K})`);
  }

  dispose(): void {
    for (const p of this.plans.values()) {
      this.api.cublasLtMatrixLayoutDestroy(p.a);
      this.api.cublasLtMatrixLayoutDestroy(p.b);
      this.api.cublasLtMatrixLayoutDestroy(p.d);
    }
    this.plans.clear();
    this.api.cublasLtMatmulPreferenceDestroy(this.pref);
    if (this.singleChainPref !== null) this.api.cublasLtMatmulPreferenceDestroy(this.singleChainPref);
    this.api.cublasLtMatmulDescDestroy(this.desc);
    this.api.cublasLtMatmulDescDestroy(this.biasDesc);
    if (this.fp8DescHandle !== null) this.api.cublasLtMatmulDescDestroy(this.fp8DescHandle);
    this.api.cublasLtDestroy(this.handle);
  }
}
