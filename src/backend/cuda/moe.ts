// Mixture of experts on the device (Backend.moeExperts): the router GEMM, route, group, the grouped gate_up (silu *
// up fused) and down GEMMs, and the weighted combine (optionally fused with the residual add and the next norm), as
// kernels/moe.cu's kernels in one stream with no read back: the routing stays on the device, and every grid and
// buffer follows T, E, topK, H and I alone (moe-plan.ts), so a decode step's graph replays whatever its tokens
// choose. A decode step's few rows take the router, route and group in one launch (moe_router_fused, bucket "moe
// route"); more rows, the router GEMM ("gemm router": cuBLASLt, or gemm_rows in the batch-invariant mode, whose bits
// the fused kernel's logits are) then moe_route and moe_group ("moe route"). Then "gemm expert gate_up", "gemm expert
// down", "moe combine". On Hopper, from QUIRE_MOE_WGMMA_MIN_ROWS (32) rows an expert, bf16 experts' GEMMs are
// kernels/moe_wgmma.cu's (wgmma; not in the batch-invariant mode). Block-FP8 experts (W8A8, as the CPU backend's
// fp8BlockMatmul) take the _fp8 builds of the same GEMMs, each input quantized per row and 128 columns first ("moe
// quantize": x before gate_up; gate_up's f32 output, the CPU's unrounded silu_mul, before down). Expert-parallel
// (MoeExperts.local), the routing writes each chosen expert as this rank's slot, -1 where another rank holds it:
// moe_group leaves those pairs out of every group and the combine skips them, so the same kernels run only this
// rank's experts, their grids bound by its expert count.

import type { MoeExperts, MoeRoute, Tensor } from '../backend.js';
import type { LocalExperts } from '../../loader/types.js';
import type { GemmRowsVariant } from './gemm-rows.js';
import { f32, i32, ptr } from './device.js';
import { FP8_BLOCK } from '../fp8-linear.js';
import { fp8ScaleRowFloats } from './fp8-layout.js';
import { readKnob } from '../../knobs/knobs.js';
import { normThreads } from './gemm.js';
import { NORM_VEC } from './kernel-defines.js';
import { MOE_COMBINE_THREADS, MOE_GROUP_THREADS, MOE_MAX_EXPERTS, MOE_MAX_TOP_K, MOE_ROUTE_WARPS, type MoeGemmLaunch,
  moeGroupSharedBytes, type MoePlan, planMoe, tileLists } from './moe-plan.js';
import type { StepContext } from './step-context.js';
import { asCuda, type CudaTensor } from './tensor.js';

/** The device's routing of T rows: [T * topK] each, pair t * topK + j. */
interface DeviceRouting {
  experts: bigint;
  weights: bigint;
}

/**
 * The routing and its grouping (int32 offsets [E + 1], pairs in grouped order [P], each pair's position [P]), and the
 * GEMMs' tile lists (moe-plan.ts tileLists: int32 [entries, 4] each, gate_up's first, down's last).
 */
interface DeviceGroups extends DeviceRouting {
  logits: CudaTensor;
  offsets: bigint;
  pairs: bigint;
  pos: bigint;
  tiles: bigint[];
}

/** The bf16 router GEMM of the backend (gemm.ts matmul: cuBLASLt, the chain kernels, or gemm_rows when batch-invariant). */
export type RouterMatmul = (x: CudaTensor, router: CudaTensor) => CudaTensor;

/** residual += moeExperts' output (rounded to bf16); the result: rmsnorm(residual) * weight (add_rms_norm). */
export interface MoeAddNorm {
  residual: Tensor;
  weight: Tensor;
  eps: number;
}

export class CudaMoe {
  /** Tests: both grouped GEMMs on this gemm_rows variant instead of the planned one (it changes no bit). */
  variant: GemmRowsVariant | undefined = undefined;
  /**
   * Rows an expert from which bf16 experts run moe_wgmma.cu (QUIRE_MOE_WGMMA_MIN_ROWS; 0: never): sm_90 devices
   * only, never in the batch-invariant mode (its sums are not gemm_rows'). Tests may move it.
   */
  wgmmaMinRows: number;
  /** Most rows routed by moe_router_fused (QUIRE_MOE_FUSED_ROUTER_MAX_ROWS; tests may move it). */
  fusedRouterMaxRows = readKnob('QUIRE_MOE_FUSED_ROUTER_MAX_ROWS');
  /** moe_router_fused's counter of finished blocks: 0 between launches (its last block resets it). */
  private doneCounter = 0n;

  constructor(private readonly s: StepContext, private readonly routerMatmul: RouterMatmul, batchInvariant = false) {
    this.wgmmaMinRows = s.device.arch === 90 && !batchInvariant ? readKnob('QUIRE_MOE_WGMMA_MIN_ROWS') : 0;
  }

  dispose(): void {
    if (this.doneCounter !== 0n) this.s.device.free(this.doneCounter);
    this.doneCounter = 0n;
  }

  private counter(): bigint {
    if (this.doneCounter === 0n) {
      this.doneCounter = this.s.device.alloc(4);
      this.s.device.upload(this.doneCounter, new Uint32Array(1));
    }
    return this.doneCounter;
  }

  /** moe_route on logits [T, E] (bf16) into int32 experts (local slots) and f32 weights from the workspace. */
  private route(logits: CudaTensor, route: MoeRoute, local: LocalExperts): DeviceRouting {
    const [T, E] = [logits.shape[0]!, logits.shape[1]!];
    if (logits.dtype !== 'bf16') throw new Error(`moeExperts: router logits of ${logits.dtype}, not bf16`);
    checkRoute(E, route);
    const { topK } = route;
    const out = { experts: this.s.act([T * topK], 'f32').ptr, weights: this.s.act([T * topK], 'f32').ptr };  // int32, f32
    this.s.device.launch('moe.cu', 'moe_route', [Math.ceil(T / MOE_ROUTE_WARPS), 1, 1], 32 * MOE_ROUTE_WARPS,
      [ptr(logits.ptr), ptr(out.experts), ptr(out.weights), i32(T), i32(E), i32(topK), i32(route.renormalize ? 1 : 0),
        ...localArgs(local)], 0, true);
    return out;
  }

  /** Tests: the device's routing of `logits`, read back (experts as `local`'s slots where given). */
  routeToHost(logits: Tensor, route: MoeRoute, local?: LocalExperts): { experts: Int32Array; weights: Float32Array } {
    const l = asCuda(logits);
    const n = l.shape[0]! * route.topK;
    const r = this.route(l, route, local ?? allExperts(l.shape[1]!));
    return { experts: new Int32Array(this.s.readToHost(r.experts, 4 * n).slice(0, 4 * n)),
      weights: new Float32Array(this.s.readToHost(r.weights, 4 * n).slice(0, 4 * n)) };
  }

  /**
   * The router's logits, routing and grouping of x's rows: moe_router_fused where the plan has it, else the router GEMM,
   * moe_route and moe_group. Buffers from the workspace.
   */
  private groups(xs: CudaTensor, router: CudaTensor, route: MoeRoute, plan: MoePlan, local: LocalExperts): DeviceGroups {
    const [T, H] = [xs.shape[0]!, xs.shape[1]!];
    const E = router.shape[0]!;
    if (router.dtype !== 'bf16' || router.shape[1] !== H) {
      throw new Error(`moeExperts: router [${router.shape.join(', ')}] ${router.dtype} for x [${xs.shape.join(', ')}]`);
    }
    checkRoute(E, route);
    const P = T * route.topK;
    const EL = local.count;
    const d = this.s.device;
    const fused = plan.router;
    // the tile lists' arguments (tilesA, bnA, entriesA, tilesB, bnB, entriesB): bnB 0 where one list serves both
    const lists = tileLists(plan).map((l) => ({ ...l, ptr: this.s.act([l.entries, 4], 'f32').ptr }));
    const listArgs = [lists[0]!, lists[1] ?? { ptr: 0n, tokens: 0, entries: 0 }]
      .flatMap((l) => [ptr(l.ptr), i32(l.tokens), i32(l.entries)]);
    const tiles = lists.map((l) => l.ptr);
    if (!fused) {
      const logits = this.routerMatmul(xs, router);
      let g: DeviceGroups | undefined;
      this.s.timed('moe route', () => {
        const r = this.route(logits, route, local);
        g = { ...r, logits, offsets: this.s.act([EL + 1], 'f32').ptr, pairs: this.s.act([P], 'f32').ptr,
          pos: this.s.act([P], 'f32').ptr, tiles };
        d.launch('moe.cu', 'moe_group', [1, 1, 1], MOE_GROUP_THREADS,
          [ptr(r.experts), ptr(g.offsets), ptr(g.pairs), ptr(g.pos), i32(P), i32(EL), ...listArgs],
          moeGroupSharedBytes(EL), true);
      });
      return g!;
    }
    const g: DeviceGroups = { logits: this.s.act([T, E]), experts: this.s.act([P], 'f32').ptr,
      weights: this.s.act([P], 'f32').ptr, offsets: this.s.act([EL + 1], 'f32').ptr, pairs: this.s.act([P], 'f32').ptr,
      pos: this.s.act([P], 'f32').ptr, tiles };
    this.s.timed('moe route', () => d.launch('moe.cu', 'moe_router_fused', fused.grid, fused.block,
      [ptr(xs.ptr), ptr(router.ptr), ptr(g.logits.ptr), ptr(g.experts), ptr(g.weights), ptr(g.offsets), ptr(g.pairs),
        ptr(g.pos), ptr(this.counter()), i32(T), i32(E), i32(H), i32(fused.sliceChunks), i32(route.topK),
        i32(route.renormalize ? 1 : 0), ...listArgs, ...localArgs(local)], fused.sharedBytes, true));
    return g;
  }

  /**
   * Tests: the router's logits (bf16 as f32), routing, offsets and tile lists (with each one's BN) for x's rows, by
   * the path moeExperts takes for experts of width I (held by `local` where given), read back.
   */
  routerToHost(x: Tensor, router: Tensor, route: MoeRoute, I = 8, local?: LocalExperts): { logits: Float32Array; experts: Int32Array;
    weights: Float32Array; offsets: Int32Array; tiles: { tokens: number; list: Int32Array }[] } {
    const xs = asCuda(x);
    const r = asCuda(router);
    const [T, H] = [xs.shape[0]!, xs.shape[1]!];
    const E = r.shape[0]!;
    const held = local ?? allExperts(E);
    const plan = planMoe(T, E, route.topK, H, I, this.variant, this.fusedRouterMaxRows, false, held.count,
      this.wgmmaMinRows);
    const g = this.groups(xs, r, route, plan, held);
    const n = T * route.topK;
    const ints = (p: bigint, count: number) => new Int32Array(this.s.readToHost(p, 4 * count).slice(0, 4 * count));
    const bf16 = new Uint16Array(this.s.readToHost(g.logits.ptr, 2 * T * E).slice(0, 2 * T * E));
    return { logits: new Float32Array(Uint32Array.from(bf16, (b) => b << 16).buffer), experts: ints(g.experts, n),
      weights: new Float32Array(this.s.readToHost(g.weights, 4 * n).slice(0, 4 * n)), offsets: ints(g.offsets, held.count + 1),
      tiles: tileLists(plan).map((l, i) => ({ tokens: l.tokens, list: ints(g.tiles[i]!, 4 * l.entries) })) };
  }

  /**
   * moeExperts on x [T, H] with the router [E, H]; with `addNorm` (where combineFusesNorm(H)), the combine adds into
   * its residual and returns the norm after it (add_rms_norm's bits).
   */
  experts(x: Tensor, routerW: Tensor, experts: MoeExperts, route: MoeRoute, addNorm?: MoeAddNorm): CudaTensor {
    const xs = asCuda(x);
    const router = asCuda(routerW);
    const [T, H] = [xs.shape[0]!, xs.shape[1]!];
    const { numExperts: E, intermediate: I } = experts;
    const local = experts.local ?? allExperts(E);
    const EL = local.count;
    const gateUp = asCuda(experts.gateUp);
    const down = asCuda(experts.down);
    const fp8 = gateUp.quantized === 'fp8_block';
    const expertDtype = fp8 ? 'f8_e4m3' : 'bf16';
    const shapeOk = (t: CudaTensor, rows: number, cols: number, dtype = expertDtype) =>
      t.dtype === dtype && t.shape[0] === rows && t.shape[1] === cols && (dtype === 'bf16' || t.quantized === 'fp8_block');
    if (!shapeOk(gateUp, EL * 2 * I, H) || !shapeOk(down, EL * H, I) || !shapeOk(router, E, H, 'bf16')) {
      throw new Error(`moeExperts: x [${xs.shape.join(', ')}], router [${router.shape.join(', ')}], gate_up ` +
        `[${gateUp.shape.join(', ')}] ${gateUp.dtype}, down [${down.shape.join(', ')}] ${down.dtype}${fp8 ? ' (both block FP8)' : ''} ` +
        `for ${EL} of ${E} experts of width ${I}`);
    }
    if (H % 8 !== 0 || I % 8 !== 0) throw new Error(`moeExperts: hidden ${H} and width ${I} must be multiples of 8 (16-byte rows)`);
    if (fp8 && (H % FP8_BLOCK !== 0 || I % FP8_BLOCK !== 0)) {
      throw new Error(`moeExperts: block-FP8 experts need hidden ${H} and width ${I} multiples of ${FP8_BLOCK} (whole scale blocks an expert)`);
    }
    if (addNorm && !combineFusesNorm(H)) throw new Error(`moeExperts: no fused norm at hidden ${H}`);
    const out = this.s.act([T, H]);
    if (T === 0) return out;
    const k = route.topK;
    const P = T * k;
    const plan = planMoe(T, E, k, H, I, this.variant, this.fusedRouterMaxRows, fp8, EL, this.wgmmaMinRows);
    const d = this.s.device;
    const g = this.groups(xs, router, route, plan, local);
    const y = this.s.act([P, H]);
    const [gateUpTiles, downTiles] = [g.tiles[0]!, g.tiles[g.tiles.length - 1]!];
    if (fp8) {
      this.fp8Gemms(plan, xs, gateUp, down, y, g.pairs, [gateUpTiles, downTiles], k, I);
    } else {
      const act = this.s.act([P, I]);
      const gemm = (l: MoeGemmLaunch, xp: bigint, w: CudaTensor, yp: bigint, N: number, K: number, tiles: bigint) =>
        d.launch(l.file, l.kernel, l.grid, l.block, [ptr(xp), ptr(w.ptr), ptr(yp), ptr(tiles), ptr(g.pairs),
          i32(k), i32(N), i32(K), i32(l.sliceChunks)], l.sharedBytes, true);
      this.s.timed('gemm expert gate_up', () => gemm(plan.gateUp, xs.ptr, gateUp, act.ptr, I, H, gateUpTiles));
      this.s.timed('gemm expert down', () => gemm(plan.down, act.ptr, down, y.ptr, H, I, downTiles));
    }
    if (addNorm) {
      const res = asCuda(addNorm.residual);
      const w = asCuda(addNorm.weight);
      if (res.numElements !== T * H || w.numElements !== H) {
        throw new Error(`moeExperts: residual [${res.shape.join(', ')}], norm weight [${w.shape.join(', ')}] for [${T}, ${H}]`);
      }
      this.s.timed('moe combine', () => d.launch('moe.cu', 'moe_combine_add_rms_norm', [T, 1, 1], normThreads(H),
        [ptr(y.ptr), ptr(g.pos), ptr(g.weights), i32(k), ptr(res.ptr), ptr(w.ptr), ptr(out.ptr), i32(H),
          f32(addNorm.eps)], 0, true));
      return out;
    }
    this.s.timed('moe combine', () => d.launch('moe.cu', 'moe_combine',
      [Math.ceil(H / (8 * MOE_COMBINE_THREADS)), T, 1], MOE_COMBINE_THREADS,
      [ptr(y.ptr), ptr(g.pos), ptr(g.weights), ptr(out.ptr), i32(k), i32(H)], 0, true));
    return out;
  }

  /**
   * The grouped GEMMs of block-FP8 experts into y [P, H] (grouped order): x [T, H] quantized per row and 128 columns
   * (quant_fp8.cu, scales [H / 128, T]), gate_up's _fp8 build to act [P, I] in f32, act quantized likewise (scales
   * [I / 128, P]), down's _fp8 build. Buffers from the workspace; every grid follows T alone, as the bf16 path's.
   */
  private fp8Gemms(plan: MoePlan, xs: CudaTensor, gateUp: CudaTensor, down: CudaTensor, y: CudaTensor, pairs: bigint,
    tiles: [bigint, bigint], topK: number, I: number): void {
    const [T, H] = [xs.shape[0]!, xs.shape[1]!];
    const P = T * topK;
    const d = this.s.device;
    const quantize = (kernel: string, x: bigint, rows: number, K: number) => {
      const q = this.s.act([rows, K], 'f8_e4m3');
      const scales = this.s.act([K / FP8_BLOCK, rows], 'f32');
      this.s.timed('moe quantize', () => d.launch('quant_fp8.cu', kernel, [rows, Math.ceil(K / FP8_BLOCK / 4), 1], 128,
        [ptr(x), ptr(q.ptr), ptr(scales.ptr), i32(K), i32(rows)], 0, true));
      return { q: q.ptr, scales: scales.ptr, rows };
    };
    const gemm = (l: MoeGemmLaunch, x: { q: bigint; scales: bigint; rows: number }, w: CudaTensor, yp: bigint,
      N: number, K: number, list: bigint) =>
      d.launch('moe.cu', l.kernel, l.grid, l.block, [ptr(x.q), ptr(w.ptr), ptr(yp), ptr(list), ptr(pairs), i32(topK),
        i32(N), i32(K), i32(l.sliceChunks), ptr(x.scales), ptr(w.scales), i32(x.rows), i32(fp8ScaleRowFloats(K))],
      l.sharedBytes, true);
    const act = this.s.act([P, I], 'f32');
    const xq = quantize('quantize_fp8_groups_bf16', xs.ptr, T, H);
    this.s.timed('gemm expert gate_up', () => gemm(plan.gateUp, xq, gateUp, act.ptr, I, H, tiles[0]));
    const aq = quantize('quantize_fp8_groups_f32', act.ptr, P, I);
    this.s.timed('gemm expert down', () => gemm(plan.down, aq, down, y.ptr, H, I, tiles[1]));
  }
}

/** Every one of E experts, slot e the expert e (no expert parallelism). */
function allExperts(E: number): LocalExperts {
  return { first: 0, stride: 1, count: E };
}

/** moe.cu LocalMap's arguments (localFirst, localStride, localCount). */
function localArgs(local: LocalExperts): ReturnType<typeof i32>[] {
  return [i32(local.first), i32(local.stride), i32(local.count)];
}

/** Whether moe_combine_add_rms_norm takes rows of H: add_rms_norm's register path at its block (norm_fast). */
export function combineFusesNorm(H: number): boolean {
  return H % 8 === 0 && H <= 8 * normThreads(H) * NORM_VEC;
}

/** The routes the kernels take: E up to MOE_MAX_EXPERTS, top-k up to MOE_MAX_TOP_K. */
function checkRoute(E: number, route: MoeRoute): void {
  const { topK } = route;
  if (E > MOE_MAX_EXPERTS) throw new Error(`moeExperts: ${E} experts (the cuda backend routes up to ${MOE_MAX_EXPERTS})`);
  if (!(topK >= 1 && topK <= Math.min(E, MOE_MAX_TOP_K))) {
    throw new Error(`moeExperts: top-k ${topK} of ${E} experts (the cuda backend takes up to ${MOE_MAX_TOP_K})`);
  }
}
