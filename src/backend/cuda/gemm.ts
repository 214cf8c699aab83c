// GEMM dispatch and the ops fused with GEMMs: cuBLASLt for large steps, the chain kernels (kernels/gemm_chain.cu)
// for steps of up to 8 tokens (gate_up with silu_mul, the norms inside o and down), the batch-invariant mode's rows
// kernel (kernels/gemm_rows.cu), block-FP8 weights (activations quantized per token and 128 columns), and GGUF weights
// (gguf-gemm.ts). The RMS norms live here too: a chain consumer that cannot apply a pending norm falls back to the
// norm kernel.

import { readKnob } from '../../knobs/knobs.js';
import type { Tensor } from '../backend.js';
import { FP8_BLOCK } from '../fp8-linear.js';
import { f32, i32, ptr } from './device.js';
import { Gemm } from './ffi/cublaslt.js';
import { fp8ScaleRowFloats } from './fp8-layout.js';
import { CHAIN_NORM_FROM_HIDDEN, chainNormPartsBytes, chainNormRole, type ChainGemmLaunch, type ChainSilu,
  planChainGemm } from './gemm-chain.js';
import { planGemmRows } from './gemm-rows.js';
import { CudaGgufGemm, type GgufGemmOptionsIn } from './gguf-gemm.js';
import { EventGemmTuner } from './gemm-tune.js';
import { GGUF_Q8_BLOCK, GgufWeight } from './gguf-layout.js';
import { NORM_VEC } from './kernel-defines.js';
import type { StepContext } from './step-context.js';
import { asCuda, CudaTensor, NormedTensor, Q8Tensor, type PendingNorm } from './tensor.js';

export interface GemmOptions {
  batchInvariant: boolean;
  /** GEMMs of up to 8 tokens on the chain kernels (QUIRE_CHAIN_GEMM). */
  chainGemms?: boolean;
  /** A layer's norms inside its chain GEMMs at hidden sizes from CHAIN_NORM_FROM_HIDDEN (QUIRE_CHAIN_NORM). */
  chainNorms?: boolean;
  /** A split _p8 chain past one wave takes the 8-stage _s2 build, not the unsplit one (QUIRE_CHAIN_SHORT_RING). */
  chainShortRing?: boolean;
  cublasWorkspaceBytes?: number;
  /** Most rows of a single-chain GEMM shape tuned among cuBLASLt's candidates (QUIRE_CUBLAS_TUNE_UP_TO; 0: none). */
  cublasTuneUpTo?: number;
  gguf?: GgufGemmOptionsIn;
}

/**
 * Threads of a norm block (kernels/norm.cu): one per 16-byte chunk of a row up to 1024 wide, 128 up to 4096 wide,
 * else 256. Rows of one chunk per thread sum their squares alike at any width (the extra threads hold nothing),
 * so there only occupancy changes.
 */
export function normThreads(hidden: number): number {
  if (hidden % 8 !== 0 || hidden > 8 * 128 * NORM_VEC) return 256;
  return hidden <= 1024 ? Math.max(32, Math.ceil(hidden / 8 / 32) * 32) : 128;
}

export class CudaGemms {
  private readonly gemm: Gemm;
  private readonly cublasWorkspace: bigint;
  private readonly batchInvariant: boolean;
  private readonly chainGemms: boolean;
  private readonly chainNorms: boolean;
  private readonly chainShortRing: boolean;
  /** How gate_up's chain applies silu_mul (ChainSilu in gemm-chain.ts) for bf16 / FP8 weights. */
  private readonly chainSilu: { bf16: ChainSilu; fp8: ChainSilu };
  /** GEMMs that ran on kernels/gemm_chain.cu (launched, or recorded into a graph). */
  numChainGemms = 0;
  private readonly gguf: CudaGgufGemm;
  /** Times single-chain cuBLASLt candidates (gemm-tune.ts); null: the heuristic's first. */
  private readonly tuner: EventGemmTuner | null;

  constructor(private readonly s: StepContext, o: GemmOptions) {
    this.batchInvariant = o.batchInvariant;
    this.chainGemms = o.chainGemms ?? readKnob('QUIRE_CHAIN_GEMM');
    this.chainNorms = o.chainNorms ?? readKnob('QUIRE_CHAIN_NORM');
    this.chainShortRing = o.chainShortRing ?? readKnob('QUIRE_CHAIN_SHORT_RING');
    this.chainSilu = { bf16: readKnob('QUIRE_CHAIN_SILU'), fp8: readKnob('QUIRE_CHAIN_SILU_FP8') };
    const cublasBytes = o.cublasWorkspaceBytes ?? 32 << 20;
    this.cublasWorkspace = s.device.alloc(cublasBytes);
    const tuneUpTo = o.cublasTuneUpTo ?? readKnob('QUIRE_CUBLAS_TUNE_UP_TO');
    this.tuner = tuneUpTo > 0 ? new EventGemmTuner(s.device, tuneUpTo) : null;
    this.gemm = new Gemm(this.cublasWorkspace, cublasBytes, 'block', readKnob('QUIRE_CUBLAS_SINGLE_CHAIN_FROM'),
      this.tuner);
    this.gguf = new CudaGgufGemm(s, (x, w, label, bias) => this.matmul(x, w, label, bias),
      { batchInvariant: o.batchInvariant, ...o.gguf });
  }

  rmsNorm(x: Tensor, w: Tensor, eps: number): CudaTensor {
    const xs = asCuda(x);
    const [T, hidden] = [xs.shape[0]!, xs.shape[1]!];
    const out = this.s.act([T, hidden]);
    this.s.timed('norm', () => this.s.device.launch('norm.cu', 'rms_norm_bf16', [T, 1, 1], normThreads(hidden),
      [ptr(xs.ptr), ptr(asCuda(w).ptr), ptr(out.ptr), i32(hidden), f32(eps)], 0, true));
    return out;
  }

  addRmsNorm(x: Tensor, residual: Tensor, w: Tensor, eps: number): CudaTensor {
    const xs = asCuda(x);
    const [T, hidden] = [xs.shape[0]!, xs.shape[1]!];
    const out = this.s.act([T, hidden]);
    this.s.timed('norm', () => this.s.device.launch('norm.cu', 'add_rms_norm_bf16', [T, 1, 1], normThreads(hidden),
      [ptr(xs.ptr), ptr(asCuda(residual).ptr), ptr(asCuda(w).ptr), ptr(out.ptr), i32(hidden), f32(eps)], 0, true));
    return out;
  }

  /** y[T, N] = x[T, K] * w[N, K]^T (+ bias[N] before the rounding); `label` names the projection in profiles. */
  matmul(x: Tensor, w: Tensor, label?: string, bias?: Tensor | null): CudaTensor {
    if (w instanceof GgufWeight) {
      return this.gguf.matmul(asCuda(this.plain(x)), w, label ?? `N=${w.shape[0]} K=${w.shape[1]}`, bias ? asCuda(bias) : null);
    }
    if (x instanceof NormedTensor) {
      const out = this.normedChain(x, asCuda(w), label ?? 'normed', 'none', bias ? asCuda(bias) : null);
      if (out) return out;
      x = this.materialize(x);
    }
    const xs = asCuda(x);
    const ws = asCuda(w);
    const [T, K] = [xs.shape[0]!, xs.shape[1]!];
    const N = ws.shape[0]!;
    if (ws.shape[1] !== K) throw new Error(`matmul: x [${xs.shape.join(', ')}] w [${ws.shape.join(', ')}]`);
    const b = bias ? asCuda(bias) : null;
    if (b && b.numElements !== N) throw new Error(`matmul: bias [${b.shape.join(', ')}] for ${N} outputs`);
    if (ws.dtype === 'f8_e4m3') {
      if (b) throw new Error(`matmul: a bias with block-FP8 weights (${label ?? `N=${N} K=${K}`})`);
      return this.matmulFp8(xs, ws, label ?? `N=${N} K=${K}`);
    }
    const out = this.s.act([T, N]);
    if (T > 0) {
      this.s.timed(`gemm ${label ?? `N=${N} K=${K}`}`, () => {
        if (!this.batchInvariant) {
          const chain = this.chainPlan(T, N, K);  // bf16 weights only (FP8 took matmulFp8 above)
          if (chain) this.launchChain(chain, xs, ws, out, T, N, K, b);
          else this.gemm.run(xs.ptr, ws.ptr, out.ptr, T, N, K, this.s.device.stream, b?.ptr ?? 0n);
          return;
        }
        const plan = planGemmRows(T, N, K);
        this.s.device.launch('gemm_rows.cu', plan.kernel, plan.grid, plan.block, [ptr(xs.ptr), ptr(ws.ptr),
          ptr(out.ptr), ptr(b?.ptr ?? 0n), i32(T), i32(N), i32(K), i32(plan.sliceChunks)], plan.sharedBytes);
      });
    }
    return out;
  }

  /**
   * x w^T (or, siluMul, silu(gate) * up of w's halves) for a block-FP8 w: x quantized per token and 128 columns
   * (kernels/quant_fp8.cu), then the chain kernel's _fp8 build for up to 8 tokens, else cuBLASLt's block-scaled GEMM.
   * cuBLASLt takes token counts that are multiples of 4 (cuBLAS 13.1 on sm_90), so it runs on up to 3 rows more,
   * whose inputs and outputs no one reads (each output row depends on its own token only).
   */
  private matmulFp8(x: CudaTensor, w: CudaTensor, label: string, siluMul = false): CudaTensor {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const N = w.shape[0]!;
    const rows = Math.ceil(T / 4) * 4;
    const silu = siluMul ? this.chainSilu.fp8 : 'none';
    const chain = this.chainGemms && (!siluMul || silu !== 'none')
      ? planChainGemm(T, N, K, this.s.device.numSMs, silu, true) : null;
    if (siluMul && !chain) return asCuda(this.siluMul(this.matmulFp8(x, w, label)));
    const out = this.s.act([rows, siluMul ? N / 2 : N]);
    if (T === 0) return out;
    const groups = K / FP8_BLOCK;
    const xq = this.s.act([rows, K], 'f8_e4m3');
    const xScales = this.s.act([groups, rows], 'f32');
    this.s.timed('quantize', () => this.s.device.launch('quant_fp8.cu', 'quantize_fp8_groups_bf16',
      [T, Math.ceil(groups / 4), 1], 128, [ptr(x.ptr), ptr(xq.ptr), ptr(xScales.ptr), i32(K), i32(rows)], 0, true));
    this.s.timed(`gemm ${label}`, () => {
      if (!chain) {
        this.gemm.runFp8(xq.ptr, xScales.ptr, w.ptr, w.scales, out.ptr, rows, N, K, this.s.device.stream);
        return;
      }
      this.numChainGemms++;
      this.s.device.launch('gemm_chain.cu', chain.kernel, chain.grid, chain.block, [ptr(xq.ptr), ptr(w.ptr), ptr(out.ptr),
        ptr(xScales.ptr), ptr(w.scales), i32(rows), i32(fp8ScaleRowFloats(K)), i32(T), i32(N), i32(K)], chain.sharedBytes,
      true);
    });
    return new CudaTensor([T, siluMul ? N / 2 : N], out.ptr);
  }

  /**
   * The chain kernel's plan (kernels/gemm_chain.cu) where it is on and applies, else null (cuBLASLt, gemm_rows). A
   * bf16 plan that splits k between two warps is taken only where its grid runs in one wave of blocks (qwen3-8b's qkv,
   * 384 tiles of 96 KiB blocks at 2 a SM, would take two), else, with chainShortRing, the split build of 8-stage rings
   * (48 KiB blocks, 4 a SM: qwen3.5-27b's down, o and out_proj, 320 tiles) where that runs in one wave, else the
   * unsplit one.
   */
  private chainPlan(T: number, N: number, K: number, silu: ChainSilu = 'none'): ChainGemmLaunch | null {
    if (!this.chainGemms || this.batchInvariant) return null;
    const d = this.s.device;
    const oneWave = (p: ChainGemmLaunch) =>
      p.grid[0] <= d.blocksPerSM('gemm_chain.cu', p.kernel, p.block, p.sharedBytes) * d.numSMs;
    const plan = planChainGemm(T, N, K, d.numSMs, silu);
    if (plan === null || !plan.kernel.endsWith('_s2') || oneWave(plan)) return plan;
    const short = this.chainShortRing ? planChainGemm(T, N, K, d.numSMs, silu, false, true, false) : null;
    return short !== null && oneWave(short) ? short : planChainGemm(T, N, K, d.numSMs, silu, false, false);
  }

  /**
   * A bf16 chain launch; `norm`: as a producer (`out`: its residual, norm weight and parts, kernels/gemm_chain.cu's
   * ChainNormOut) or a consumer (`in`: a producer's pending norm, its parts in shared memory after the ring).
   */
  private launchChain(plan: ChainGemmLaunch, x: CudaTensor, w: CudaTensor, out: CudaTensor, T: number, N: number,
    K: number, bias: CudaTensor | null = null,
    norm: { out?: { residual: CudaTensor; weight: CudaTensor; parts: CudaTensor }; in?: PendingNorm } = {}): void {
    this.numChainGemms++;
    const extra = norm.in ? chainNormPartsBytes(T, norm.in.numParts) : 0;
    this.s.device.launch('gemm_chain.cu', plan.kernel, plan.grid, plan.block,
      [ptr(x.ptr), ptr(w.ptr), ptr(out.ptr), ptr(bias?.ptr ?? 0n), i32(T), i32(N), i32(K),
        ptr(norm.out?.residual.ptr ?? 0n), ptr(norm.out?.weight.ptr ?? 0n), ptr(norm.out?.parts.ptr ?? 0n),
        ptr(norm.in?.parts ?? 0n), i32(norm.in?.numParts ?? 0), f32(norm.in?.eps ?? 0)], plan.sharedBytes + extra, true);
  }

  /**
   * addRmsNorm(matmul(x, w, label, bias), residual, normW, eps), the norm inside the chain kernels where a step's few
   * tokens take them and the hidden size is CHAIN_NORM_FROM_HIDDEN or more: this GEMM adds its outputs into the
   * residual and writes them times normW, each block its rows' sums of squares, and the next GEMM (matmul or
   * matmulSiluMul, a chain consumer) sums those to the norm's scale and applies it to its sums (kernels/gemm_chain.cu).
   * The residual's bits are add_rms_norm's; the next GEMM's outputs are within bf16 rounding of the norm kernel's path.
   */
  matmulAddRmsNorm(x: Tensor, w: Tensor, label: string, bias: Tensor | null, residual: Tensor, normW: Tensor,
    eps: number): Tensor {
    if (w instanceof GgufWeight) return this.addRmsNormQ8(this.matmul(x, w, label, bias), residual, normW, eps);
    const xs = asCuda(x);
    const ws = asCuda(w);
    const [T, K] = [xs.shape[0]!, xs.shape[1]!];
    const N = ws.shape[0]!;
    const plan = this.chainNorms && ws.dtype === 'bf16' && ws.shape[1] === K && T > 0 && N >= CHAIN_NORM_FROM_HIDDEN
      ? this.chainPlan(T, N, K) : null;
    if (!plan || !chainNormRole(plan).producer) return this.addRmsNorm(this.matmul(x, w, label, bias), residual, normW, eps);
    const b = bias ? asCuda(bias) : null;
    if (b && b.numElements !== N) throw new Error(`matmul: bias [${b.shape.join(', ')}] for ${N} outputs`);
    const res = asCuda(residual);
    const weight = asCuda(normW);
    if (res.numElements !== T * N || weight.numElements !== N) {
      throw new Error(`matmulAddRmsNorm: residual [${res.shape.join(', ')}], norm weight [${weight.shape.join(', ')}] for [${T}, ${N}]`);
    }
    const out = this.s.act([T, N]);
    const parts = this.s.act([T, plan.grid[0]], 'f32');
    this.s.timed(`gemm ${label}`, () => this.launchChain(plan, xs, ws, out, T, N, K, b, { out: { residual: res, weight, parts } }));
    return new NormedTensor([T, N], out.ptr, { parts: parts.ptr, numParts: plan.grid[0], eps, residual: res, weight });
  }

  /** A consumer chain of a pending norm's input (silu 'none': matmul), or null where none takes it. */
  private normedChain(x: NormedTensor, w: CudaTensor, label: string, silu: ChainSilu, bias: CudaTensor | null = null):
    CudaTensor | null {
    const [T, K] = [x.shape[0]!, x.shape[1]!];
    const N = w.shape[0]!;
    if (w.dtype !== 'bf16' || w.shape[1] !== K || (bias && bias.numElements !== N)) return null;
    const plan = this.chainPlan(T, N, K, silu);
    if (!plan || !chainNormRole(plan).consumer) return null;
    const out = this.s.act([T, silu === 'none' ? N : N / 2]);
    this.s.timed(`gemm ${label}`, () => this.launchChain(plan, x, w, out, T, N, K, bias, { in: x.norm }));
    return out;
  }

  /** x for an op other than a chain GEMM: a pending norm's input gets the norm kernel, any other tensor is x. */
  plain(x: Tensor): Tensor {
    return x instanceof NormedTensor ? this.materialize(x) : x;
  }

  /** A pending norm's input for a GEMM that cannot apply its scale: the norm kernel on the updated residual. */
  private materialize(x: NormedTensor): CudaTensor {
    return this.rmsNorm(x.norm.residual, x.norm.weight, x.norm.eps);
  }

  /** silu(x gate^T) * (x up^T) for gateUp [2I, K] (gate rows first): one chain kernel for a few tokens. */
  matmulSiluMul(x: Tensor, gateUp: Tensor): Tensor {
    if (gateUp instanceof GgufWeight) return this.siluMulQ8(this.matmul(x, gateUp, 'gate_up'));
    if (x instanceof NormedTensor) {
      const out = this.chainSilu.bf16 !== 'none' ? this.normedChain(x, asCuda(gateUp), 'gate_up + silu', this.chainSilu.bf16) : null;
      if (out) return out;
      x = this.materialize(x);
    }
    const xs = asCuda(x);
    const ws = asCuda(gateUp);
    const [T, K] = [xs.shape[0]!, xs.shape[1]!];
    const N = ws.shape[0]!;
    if (ws.dtype === 'f8_e4m3' && ws.shape[1] === K) return this.matmulFp8(xs, ws, 'gate_up', true);
    const silu = this.chainSilu.bf16;
    const chain = ws.shape[1] === K && silu !== 'none' ? this.chainPlan(T, N, K, silu) : null;
    if (!chain) return this.siluMul(this.matmul(x, gateUp, 'gate_up'));
    const out = this.s.act([T, N / 2]);
    this.s.timed('gemm gate_up + silu', () => this.launchChain(chain, xs, ws, out, T, N, K));
    return out;
  }

  siluMul(gateUp: Tensor): CudaTensor {
    const g = asCuda(gateUp);
    const [T, twoI] = [g.shape[0]!, g.shape[1]!];
    const I = twoI / 2;
    const out = this.s.act([T, I]);
    const perThread = I % 8 === 0 ? 8 : 1;  // bf16 columns per thread: 16-byte loads (kernels/activation.cu)
    this.s.timed('activation', () => this.s.device.launch('activation.cu', 'silu_mul_bf16',
      [Math.ceil((T * I) / (256 * perThread)), 1, 1], 256, [ptr(g.ptr), ptr(out.ptr), i32(T), i32(I)], 0, true));
    return out;
  }

  /**
   * After a GGUF projection: siluMul, and where the step takes the GEMV, its output's q8 blocks too (the down
   * projection's input, most likely GGUF as well), in the same kernel: the GEMV does not quantize it again.
   */
  private siluMulQ8(gateUp: CudaTensor): CudaTensor {
    const [T, twoI] = [gateUp.shape[0]!, gateUp.shape[1]!];
    const I = twoI / 2;
    if (!this.gguf.takesGemv(T) || I % GGUF_Q8_BLOCK !== 0) return this.siluMul(gateUp);
    const out = this.s.act([T, I]);
    const q8 = this.gguf.allocQ8(T, I);
    this.s.timed('activation', () => this.s.device.launch('activation.cu', 'silu_mul_q8_bf16',
      [Math.ceil((T * I) / (256 * 8)), 1, 1], 256, [ptr(gateUp.ptr), ptr(out.ptr), ptr(q8.xq), ptr(q8.xds), i32(T), i32(I)],
      0, true));
    return new Q8Tensor([T, I], out.ptr, q8);
  }

  /** After a GGUF projection: addRmsNorm, and as siluMulQ8 the normed rows' q8 blocks where the step takes the GEMV. */
  private addRmsNormQ8(x: CudaTensor, residual: Tensor, w: Tensor, eps: number): CudaTensor {
    const [T, hidden] = [x.shape[0]!, x.shape[1]!];
    if (!this.gguf.takesGemv(T) || hidden % GGUF_Q8_BLOCK !== 0) return this.addRmsNorm(x, residual, w, eps);
    const out = this.s.act([T, hidden]);
    const q8 = this.gguf.allocQ8(T, hidden);
    this.s.timed('norm', () => this.s.device.launch('norm.cu', 'add_rms_norm_q8_bf16', [T, 1, 1], normThreads(hidden),
      [ptr(x.ptr), ptr(asCuda(residual).ptr), ptr(asCuda(w).ptr), ptr(out.ptr), ptr(q8.xq), ptr(q8.xds), i32(hidden),
        f32(eps)], 0, true));
    return new Q8Tensor([T, hidden], out.ptr, q8);
  }

  /** x * sigmoid(gate), both [T, N] (output-gated attention): kernels/activation.cu's sigmoid_mul, into a new tensor. */
  sigmoidMul(x: Tensor, gate: Tensor): CudaTensor {
    const [xs, gs] = [asCuda(this.plain(x)), asCuda(this.plain(gate))];
    const [T, N] = [xs.shape[0]!, xs.shape[1]!];
    if (gs.shape[0] !== T || gs.shape[1] !== N) {
      throw new Error(`sigmoidMul: x [${xs.shape.join(', ')}] and gate [${gs.shape.join(', ')}] differ in shape`);
    }
    const out = this.s.act([T, N]);
    const perThread = (T * N) % 8 === 0 ? 8 : 1;  // bf16 elements per thread: 16-byte loads
    this.s.timed('activation', () => this.s.device.launch('activation.cu', 'sigmoid_mul_bf16',
      [Math.ceil((T * N) / (256 * perThread)), 1, 1], 256, [ptr(xs.ptr), ptr(gs.ptr), ptr(out.ptr), i32(T), i32(N)], 0,
      true));
    return out;
  }

  /** acc += sigmoid(gate) * y per row, in place (Backend.addSigmoidGated: a gated shared expert). */
  addSigmoidGated(acc: Tensor, gate: Tensor, y: Tensor): void {
    const [as, gs, ys] = [asCuda(acc), asCuda(this.plain(gate)), asCuda(this.plain(y))];
    const [T, N] = [as.shape[0]!, as.shape[1]!];
    if (gs.shape[0] !== T || gs.numElements !== T || ys.shape[0] !== T || ys.shape[1] !== N) {
      throw new Error(`addSigmoidGated: acc [${as.shape.join(', ')}], gate [${gs.shape.join(', ')}], y [${ys.shape.join(', ')}]`);
    }
    this.s.timed('activation', () => this.s.device.launch('activation.cu', 'add_sigmoid_gated_bf16',
      [Math.ceil((T * N) / 256), 1, 1], 256, [ptr(as.ptr), ptr(gs.ptr), ptr(ys.ptr), i32(T), i32(N)], 0, true));
  }

  /** The backend's bf16 GEMM on x [n, n], w [n, n] into y (the roofline probe). */
  runSquare(x: bigint, w: bigint, y: bigint, n: number): void {
    this.gemm.run(x, w, y, n, n, n, this.s.device.stream);
  }

  dispose(): void {
    this.gemm.dispose();
    this.tuner?.dispose();
    this.s.device.free(this.cublasWorkspace);
  }
}
