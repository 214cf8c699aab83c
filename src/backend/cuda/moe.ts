// Mixture of experts on the device (Backend.moeExperts): route, group, the grouped gate_up (silu * up fused) and down
// GEMMs, and the weighted combine, as kernels/moe.cu's kernels in one stream with no read back: the routing stays on
// the device, and every grid and buffer follows T, E, topK, H and I alone (moe-plan.ts), so a decode step's graph
// replays whatever its tokens choose. Its profile buckets: "moe route" (routing and grouping), "gemm expert gate_up",
// "gemm expert down", "moe combine"; the router GEMM before it is the model's matmul ("gemm router").

import type { MoeExperts, MoeRoute, Tensor } from '../backend.js';
import type { GemmRowsVariant } from './gemm-rows.js';
import { i32, ptr } from './device.js';
import { MOE_COMBINE_THREADS, MOE_GROUP_THREADS, MOE_MAX_EXPERTS, MOE_MAX_TOP_K, MOE_ROUTE_WARPS, type MoeGemmLaunch,
  planMoe } from './moe-plan.js';
import type { StepContext } from './step-context.js';
import { asCuda, type CudaTensor } from './tensor.js';

/** The device's routing of T rows: [T * topK] each, pair t * topK + j. */
interface DeviceRouting {
  experts: bigint;
  weights: bigint;
}

export class CudaMoe {
  /** Tests: both grouped GEMMs on this gemm_rows variant instead of the planned one (it changes no bit). */
  variant: GemmRowsVariant | undefined = undefined;

  constructor(private readonly s: StepContext) {}

  /** moe_route on logits [T, E] (bf16) into int32 experts and f32 weights from the workspace. */
  private route(logits: CudaTensor, route: MoeRoute): DeviceRouting {
    const [T, E] = [logits.shape[0]!, logits.shape[1]!];
    const { topK } = route;
    if (logits.dtype !== 'bf16') throw new Error(`moeExperts: router logits of ${logits.dtype}, not bf16`);
    if (E > MOE_MAX_EXPERTS) throw new Error(`moeExperts: ${E} experts (the cuda backend routes up to ${MOE_MAX_EXPERTS})`);
    if (!(topK >= 1 && topK <= Math.min(E, MOE_MAX_TOP_K))) {
      throw new Error(`moeExperts: top-k ${topK} of ${E} experts (the cuda backend takes up to ${MOE_MAX_TOP_K})`);
    }
    const out = { experts: this.s.act([T * topK], 'f32').ptr, weights: this.s.act([T * topK], 'f32').ptr };  // int32, f32
    this.s.device.launch('moe.cu', 'moe_route', [Math.ceil(T / MOE_ROUTE_WARPS), 1, 1], 32 * MOE_ROUTE_WARPS,
      [ptr(logits.ptr), ptr(out.experts), ptr(out.weights), i32(T), i32(E), i32(topK), i32(route.renormalize ? 1 : 0)],
      0, true);
    return out;
  }

  /** Tests: the device's routing of `logits`, read back. */
  routeToHost(logits: Tensor, route: MoeRoute): { experts: Int32Array; weights: Float32Array } {
    const l = asCuda(logits);
    const n = l.shape[0]! * route.topK;
    const r = this.route(l, route);
    return { experts: new Int32Array(this.s.readToHost(r.experts, 4 * n).slice(0, 4 * n)),
      weights: new Float32Array(this.s.readToHost(r.weights, 4 * n).slice(0, 4 * n)) };
  }

  experts(x: Tensor, routerLogits: Tensor, experts: MoeExperts, route: MoeRoute): CudaTensor {
    const xs = asCuda(x);
    const logits = asCuda(routerLogits);
    const [T, H] = [xs.shape[0]!, xs.shape[1]!];
    const { numExperts: E, intermediate: I } = experts;
    const gateUp = asCuda(experts.gateUp);
    const down = asCuda(experts.down);
    if (gateUp.quantized === 'fp8_block' || down.quantized === 'fp8_block') {
      throw new Error('moeExperts: block-FP8 experts are not supported on the cuda backend yet (bf16 experts only)');
    }
    const shapeOk = (t: CudaTensor, rows: number, cols: number) => t.dtype === 'bf16' && t.shape[0] === rows && t.shape[1] === cols;
    if (!shapeOk(gateUp, E * 2 * I, H) || !shapeOk(down, E * H, I) || logits.shape[0] !== T || logits.shape[1] !== E) {
      throw new Error(`moeExperts: x [${xs.shape.join(', ')}], logits [${logits.shape.join(', ')}], gate_up ` +
        `[${gateUp.shape.join(', ')}] ${gateUp.dtype}, down [${down.shape.join(', ')}] ${down.dtype} for ${E} experts of width ${I}`);
    }
    if (H % 8 !== 0 || I % 8 !== 0) throw new Error(`moeExperts: hidden ${H} and width ${I} must be multiples of 8 (16-byte rows)`);
    const out = this.s.act([T, H]);
    if (T === 0) return out;
    const k = route.topK;
    const P = T * k;
    const plan = planMoe(T, E, k, H, I, this.variant);
    const d = this.s.device;
    // int32 buffers: offsets [E + 1], the pairs in grouped order, each pair's grouped position
    const offsets = this.s.act([E + 1], 'f32').ptr;
    const pairs = this.s.act([P], 'f32').ptr;
    const pos = this.s.act([P], 'f32').ptr;
    const act = this.s.act([P, I]);
    const y = this.s.act([P, H]);
    let routing: DeviceRouting | undefined;
    this.s.timed('moe route', () => {
      routing = this.route(logits, route);
      d.launch('moe.cu', 'moe_group', [1, 1, 1], MOE_GROUP_THREADS,
        [ptr(routing.experts), ptr(offsets), ptr(pairs), ptr(pos), i32(P), i32(E)], 4 * E, true);
    });
    const gemm = (l: MoeGemmLaunch, xp: bigint, w: CudaTensor, yp: bigint, N: number, K: number) =>
      d.launch('moe.cu', l.kernel, l.grid, l.block, [ptr(xp), ptr(w.ptr), ptr(yp), ptr(offsets), ptr(pairs), i32(E),
        i32(k), i32(N), i32(K), i32(l.sliceChunks)], l.sharedBytes, true);
    this.s.timed('gemm expert gate_up', () => gemm(plan.gateUp, xs.ptr, gateUp, act.ptr, I, H));
    this.s.timed('gemm expert down', () => gemm(plan.down, act.ptr, down, y.ptr, H, I));
    this.s.timed('moe combine', () => d.launch('moe.cu', 'moe_combine',
      [Math.ceil(H / (8 * MOE_COMBINE_THREADS)), T, 1], MOE_COMBINE_THREADS,
      [ptr(y.ptr), ptr(pos), ptr(routing!.weights), ptr(out.ptr), i32(k), i32(H)], 0, true));
    return out;
  }
}
