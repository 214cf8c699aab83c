// The two inner loops of paged attention in WebAssembly SIMD, for one query head:
//
//   scores(q, kBase, slots, numKeys, scale, out, D):
//     out[p] = scale * dot(q[0..D), k row at kBase + slots[p])       p < numKeys
//     dot = (lane0 + lane1) + (lane2 + lane3), lane j summing d = j, j+4, ... in order
//   weightedSum(probs, vBase, slots, numKeys, out, D):
//     out[d] += probs[p] * v[kBase + slots[p]][d]  for p = 0..numKeys-1 in order
//
// slots[p] is the byte offset of kv position p's row in its layer (page walk done
// by the caller); D is a multiple of 4. Both orders depend only on the key
// positions, never on chunking or batch.

import { assembleModule, F32, get, I32, i32, loop, OP, set, simd, V128, wasm, type WasmFunc,
  type WasmMemory, type WasmModule } from './wasm-asm.js';

const zero128 = [...simd(OP.v128Const), ...new Array<number>(16).fill(0)];

function scoresFunc(): WasmFunc {
  const [q, kBase, slots, numKeys, scale, out, D] = [0, 1, 2, 3, 4, 5, 6];
  const [pb, pEnd, db, dEnd, kp] = [7, 8, 9, 10, 11];
  const acc = 12;
  const lane = (j: number): number[] => [...get(acc), ...simd(OP.f32x4ExtractLane), j];
  const inner = [...get(acc), ...get(q), ...get(db), OP.i32Add, ...simd(OP.v128Load), 2, 0,
    ...get(kp), ...get(db), OP.i32Add, ...simd(OP.v128Load), 2, 0, ...simd(OP.f32x4Mul), ...simd(OP.f32x4Add), ...set(acc)];
  const outer = [
    ...get(kBase), ...get(slots), ...get(pb), OP.i32Add, OP.i32Load, 2, 0, OP.i32Add, ...set(kp),
    ...zero128, ...set(acc), ...i32(0), ...set(db),
    ...loop(db, dEnd, 16, inner),
    ...get(out), ...get(pb), OP.i32Add,
    ...lane(0), ...lane(1), OP.f32Add, ...lane(2), ...lane(3), OP.f32Add, OP.f32Add, ...get(scale), OP.f32Mul,
    OP.f32Store, 2, 0,
  ];
  return {
    name: 'scores', params: [I32, I32, I32, I32, F32, I32, I32], results: [], locals: [[5, I32], [1, V128]],
    body: [...get(numKeys), ...i32(2), OP.i32Shl, ...set(pEnd), ...get(D), ...i32(2), OP.i32Shl, ...set(dEnd),
      ...loop(pb, pEnd, 4, outer)],
  };
}

function weightedSumFunc(): WasmFunc {
  const [probs, vBase, slots, numKeys, out, D] = [0, 1, 2, 3, 4, 5];
  const [pb, pEnd, db, dEnd, vp] = [6, 7, 8, 9, 10];
  const prob = 11;
  const inner = [...get(out), ...get(db), OP.i32Add,
    ...get(out), ...get(db), OP.i32Add, ...simd(OP.v128Load), 2, 0,
    ...get(prob), ...get(vp), ...get(db), OP.i32Add, ...simd(OP.v128Load), 2, 0, ...simd(OP.f32x4Mul),
    ...simd(OP.f32x4Add), ...simd(OP.v128Store), 2, 0];
  const outer = [
    ...get(vBase), ...get(slots), ...get(pb), OP.i32Add, OP.i32Load, 2, 0, OP.i32Add, ...set(vp),
    ...get(probs), ...get(pb), OP.i32Add, OP.f32Load, 2, 0, ...simd(OP.f32x4Splat), ...set(prob),
    ...i32(0), ...set(db),
    ...loop(db, dEnd, 16, inner),
  ];
  return {
    name: 'weightedSum', params: [I32, I32, I32, I32, I32, I32], results: [], locals: [[5, I32], [1, V128]],
    body: [...get(numKeys), ...i32(2), OP.i32Shl, ...set(pEnd), ...get(D), ...i32(2), OP.i32Shl, ...set(dEnd),
      ...loop(pb, pEnd, 4, outer)],
  };
}

let compiled: WasmModule | null | undefined;

export function wasmAttentionModule(): WasmModule | null {
  if (compiled === undefined) {
    const bytes = assembleModule([scoresFunc(), weightedSumFunc()]);
    compiled = wasm.validate(bytes) ? new wasm.Module(bytes) : null;
  }
  return compiled;
}

export interface WasmAttention {
  scores(q: number, kBase: number, slots: number, numKeys: number, scale: number, out: number, D: number): void;
  weightedSum(probs: number, vBase: number, slots: number, numKeys: number, out: number, D: number): void;
}

export function instantiateWasmAttention(memory: WasmMemory): WasmAttention {
  const module = wasmAttentionModule();
  if (!module) throw new Error('CPU backend: this runtime has no WebAssembly SIMD');
  return new wasm.Instance(module, { env: { memory } }).exports as unknown as WasmAttention;
}
