// Mixture of experts on the CPU backend: route every row (../moe-route.ts), then for each expert that any row chose,
// its rows gathered into one matmul through the expert's slice of the stacked weights, and each row's weighted
// sum over its experts in slot order. Each matmul output element depends on its own row alone (kernels.ts), so a
// row's result never depends on which other rows share its experts. Expert-parallel (MoeExperts.local): only the
// experts this rank holds run, each at its local slot of the stacked weights, and the others' pairs add nothing.

import type { MoeExperts, MoeRoute, Tensor } from '../backend.js';
import { FP8_BLOCK } from '../fp8-linear.js';
import { pairsByExpert, routeTokens, toLocalSlots } from '../moe-route.js';
import { CpuFp8Tensor } from './fp8.js';
import { asCpu, CpuTensor } from './tensor.js';

export interface MoeOps {
  alloc(shape: number[]): CpuTensor;
  matmul(x: Tensor, w: Tensor): Tensor;
  siluMul(gateUp: Tensor): Tensor;
}

/** Rows [row0, row0 + rows) of a stacked weight, sharing its memory. */
export function weightRows(w: Tensor, row0: number, rows: number): Tensor {
  const K = w.shape[1]!;
  if (w instanceof CpuFp8Tensor) {
    if (row0 % FP8_BLOCK !== 0 || rows % FP8_BLOCK !== 0) throw new Error(`weightRows: FP8 rows ${row0}+${rows} split a block`);
    const groups = Math.ceil(K / FP8_BLOCK);
    return new CpuFp8Tensor([rows, K], w.values.subarray(row0 * K, (row0 + rows) * K),
      w.scaleInv.subarray((row0 / FP8_BLOCK) * groups, ((row0 + rows) / FP8_BLOCK) * groups));
  }
  const t = asCpu(w);
  // a bf16 weight packs two elements in each f32 slot of its view
  const perSlot = t.dtype === 'bf16' ? 2 : 1;
  if ((row0 * K) % perSlot !== 0 || (rows * K) % perSlot !== 0) throw new Error('weightRows: a bf16 slice must start on an even element');
  const [start, end] = [(row0 * K) / perSlot, ((row0 + rows) * K) / perSlot];
  const { bufferId, offset, data } = t.view;
  return new CpuTensor([rows, K], { bufferId, offset: offset + start, data: data.subarray(start, end) }, t.dtype);
}

export function moeExperts(ops: MoeOps, x: Tensor, routerLogits: Tensor, experts: MoeExperts, route: MoeRoute): Tensor {
  const xs = asCpu(x);
  const [T, H] = xs.shape as [number, number];
  const E = experts.numExperts;
  const I = experts.intermediate;
  const logits = asCpu(routerLogits);
  if (logits.shape[0] !== T || logits.shape[1] !== E) {
    throw new Error(`moeExperts: router logits [${logits.shape.join(', ')}] for ${T} rows and ${E} experts`);
  }
  const routing = routeTokens(logits.data, T, E, route);
  const weights = routing.weights;
  const chosen = toLocalSlots(routing.experts, experts.local);
  const k = route.topK;
  const pairOut = new Float32Array(T * k * H);
  pairsByExpert(chosen, experts.local?.count ?? E).forEach((pairs, e) => {
    if (pairs.length === 0) return;
    const xe = ops.alloc([pairs.length, H]);
    pairs.forEach((pair, i) => xe.data.set(xs.data.subarray(Math.floor(pair / k) * H, (Math.floor(pair / k) + 1) * H), i * H));
    const act = ops.siluMul(ops.matmul(xe, weightRows(experts.gateUp, e * 2 * I, 2 * I)));
    const ye = asCpu(ops.matmul(act, weightRows(experts.down, e * H, H))).data;
    pairs.forEach((pair, i) => pairOut.set(ye.subarray(i * H, (i + 1) * H), pair * H));
  });
  const out = ops.alloc([T, H]);
  const o = out.data;
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < H; h++) {
      let sum = 0;
      // an expert another rank holds adds nothing here
      for (let j = 0; j < k; j++) if (chosen[t * k + j]! >= 0) sum += weights[t * k + j]! * pairOut[(t * k + j) * H + h]!;
      o[t * H + h] = sum;
    }
  }
  return out;
}
