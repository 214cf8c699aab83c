// y[T, N] = x[T, K] * w[N, K]^T in WebAssembly SIMD over one shared wasm memory.
//
// The module is assembled here, byte by byte: one function per R x C output
// tile, tile_RxC(xPtr, xStrideBytes, wPtr, wStrideBytes, yPtr, yStrideBytes, K).
// Every output element, whatever tile computes it, is
//
//   lane[j] = sum over k = j, j+4, j+8, ... < K4 of x[k] * w[k]   (f32, in k order)
//   y = ((lane0 + lane1) + (lane2 + lane3)) + x[K4] w[K4] + ... + x[K-1] w[K-1]
//
// with K4 = K & ~3, f32 arithmetic and no fused multiply-add, so the result does
// not depend on the tile, on T, or on which thread ran it (batch invariance).

import { assembleModule, F32, get, I32, i32, loop, OP, set, simd, V128, wasm, type WasmFunc, type WasmMemory,
  type WasmModule } from './wasm-asm.js';

function tileFunc(R: number, C: number, wBf16: boolean): WasmFunc {
  const [xPtr, xStride, wPtr, wStride, yPtr, yStride, K] = [0, 1, 2, 3, 4, 5, 6];
  const [kb, k4b, kEnd] = [7, 8, 9];
  const sum = 10;
  let next = 11;
  const xp = Array.from({ length: R }, () => next++);
  const wp = Array.from({ length: C }, () => next++);
  const acc = Array.from({ length: R * C }, () => next++);
  const xv = Array.from({ length: R }, () => next++);
  const wv = Array.from({ length: C }, () => next++);
  const k8b = next++;
  const raw = Array.from({ length: C }, () => next++);
  const locals: [number, number][] = [[3, I32], [1, F32], [R + C, I32], [R * C + R + C, V128], [1, I32], [C, V128]];
  const b: number[] = [];
  xp.forEach((l, r) => b.push(...get(xPtr), ...get(xStride), ...i32(r), OP.i32Mul, OP.i32Add, ...set(l)));
  wp.forEach((l, c) => b.push(...get(wPtr), ...get(wStride), ...i32(c), OP.i32Mul, OP.i32Add, ...set(l)));
  b.push(...get(K), ...i32(-4), OP.i32And, ...i32(2), OP.i32Shl, ...set(k4b));
  b.push(...get(K), ...i32(2), OP.i32Shl, ...set(kEnd));
  const body: number[] = [];
  xp.forEach((p, r) => body.push(...get(p), ...get(kb), OP.i32Add, ...simd(OP.v128Load), 2, 0, ...set(xv[r]!)));
  // bf16 w: 4 halves widened to i32 lanes, shifted into the high half = the exact f32.
  const wAddr = (p: number): number[] => wBf16 ? [...get(p), ...get(kb), ...i32(1), OP.i32ShrU, OP.i32Add]
    : [...get(p), ...get(kb), OP.i32Add];
  const wLoad4 = (p: number): number[] => wBf16
    ? [...wAddr(p), ...simd(OP.v128Load16x4U), 1, 0, ...i32(16), ...simd(OP.i32x4Shl)]
    : [...wAddr(p), ...simd(OP.v128Load), 2, 0];
  const wLoad1 = (p: number): number[] => wBf16
    ? [...wAddr(p), OP.i32Load16U, 1, 0, ...i32(16), OP.i32Shl, OP.f32ReinterpretI32]
    : [...wAddr(p), OP.f32Load, 2, 0];
  wp.forEach((p, c) => body.push(...wLoad4(p), ...set(wv[c]!)));
  const multiplyAdd: number[] = [];
  for (let r = 0; r < R; r++) {
    for (let c = 0; c < C; c++) {
      const a = acc[r * C + c]!;
      multiplyAdd.push(...get(a), ...get(xv[r]!), ...get(wv[c]!), ...simd(OP.f32x4Mul), ...simd(OP.f32x4Add), ...set(a));
    }
  }
  body.push(...multiplyAdd);
  if (wBf16) {
    // 8 bf16 per load: the low 4 then the high 4 go through the same lanes in the
    // same k order as two 4-steps would, so the sum is unchanged.
    const xLoad = (offset: number): number[] => xp.flatMap((p, r) =>
      [...get(p), ...get(kb), OP.i32Add, ...simd(OP.v128Load), 2, offset, ...set(xv[r]!)]);
    const widen = (op: number): number[] => raw.flatMap((rw, c) =>
      [...get(rw), ...simd(op), ...i32(16), ...simd(OP.i32x4Shl), ...set(wv[c]!)]);
    const body8 = [
      ...wp.flatMap((p, c) => [...wAddr(p), ...simd(OP.v128Load), 1, 0, ...set(raw[c]!)]),
      ...xLoad(0), ...widen(OP.i32x4ExtendLowI16x8U), ...multiplyAdd,
      ...xLoad(16), ...widen(OP.i32x4ExtendHighI16x8U), ...multiplyAdd,
    ];
    b.push(...get(K), ...i32(-8), OP.i32And, ...i32(2), OP.i32Shl, ...set(k8b));
    b.push(...loop(kb, k8b, 32, body8));
  }
  b.push(...loop(kb, k4b, 16, body));
  for (let r = 0; r < R; r++) {
    for (let c = 0; c < C; c++) {
      const a = acc[r * C + c]!;
      const lane = (j: number): number[] => [...get(a), ...simd(OP.f32x4ExtractLane), j];
      b.push(...lane(0), ...lane(1), OP.f32Add, ...lane(2), ...lane(3), OP.f32Add, OP.f32Add, ...set(sum));
      b.push(...get(k4b), ...set(kb));
      b.push(...loop(kb, kEnd, 4, [...get(sum), ...get(xp[r]!), ...get(kb), OP.i32Add, OP.f32Load, 2, 0,
        ...wLoad1(wp[c]!), OP.f32Mul, OP.f32Add, ...set(sum)]));
      b.push(...get(yPtr), ...get(yStride), ...i32(r), OP.i32Mul, OP.i32Add, ...i32(4 * c), OP.i32Add,
        ...get(sum), OP.f32Store, 2, 0);
    }
  }
  return { name: tileName(R, C, wBf16), params: [I32, I32, I32, I32, I32, I32, I32], results: [], locals, body: b };
}

/** Tiles the driver uses: 4 x 2 for runs of 4 rows, 1 x 8 for single rows, and their column remainders. */
const TILES: [number, number][] = [[4, 2], [4, 1], [1, 8], [1, 1]];
/** Each tile twice: w in f32, and w in bf16 (widened exactly in registers). */
const FUNCS: [number, number, boolean][] = TILES.flatMap(([R, C]) => [[R, C, false], [R, C, true]] as [number, number, boolean][]);
const tileName = (R: number, C: number, wBf16: boolean): string => `tile_${R}x${C}${wBf16 ? '_bf16' : ''}`;

export function wasmMatmulBytes(): Uint8Array {
  return assembleModule(FUNCS.map(([R, C, bf16]) => tileFunc(R, C, bf16)));
}


let compiled: WasmModule | null | undefined;

/** The compiled module, or null where this runtime lacks WebAssembly SIMD. */
export function wasmMatmulModule(): WasmModule | null {
  if (compiled === undefined) {
    const bytes = wasmMatmulBytes();
    compiled = wasm.validate(bytes) ? new wasm.Module(bytes) : null;
  }
  return compiled;
}

type Tile = (xPtr: number, xStride: number, wPtr: number, wStride: number, yPtr: number,
  yStride: number, K: number) => void;

/** Columns [n0, n1) of y = x w^T; pointers are byte addresses in the module's memory; w is f32 or bf16. */
export type WasmMatmul = (xPtr: number, wPtr: number, yPtr: number, T: number, K: number, N: number,
  n0: number, n1: number, wBf16: boolean) => void;

export function instantiateWasmMatmul(module: WasmModule, memory: WasmMemory): WasmMatmul {
  const exports = new wasm.Instance(module, { env: { memory } }).exports as Record<string, Tile>;
  const tiles = (bf16: boolean): Tile[] => TILES.map(([R, C]) => exports[tileName(R, C, bf16)]!);
  const byDType = [tiles(false), tiles(true)];
  return (xPtr, wPtr, yPtr, T, K, N, n0, n1, wBf16) => {
    const [t4x2, t4x1, t1x8, t1x1] = byDType[wBf16 ? 1 : 0] as [Tile, Tile, Tile, Tile];
    const rowBytes = K * 4;
    const wRowBytes = K * (wBf16 ? 2 : 4);
    const yRowBytes = N * 4;
    let t = 0;
    for (; t + 4 <= T; t += 4) {
      const x = xPtr + t * rowBytes;
      const y = yPtr + t * yRowBytes;
      let n = n0;
      for (; n + 2 <= n1; n += 2) t4x2(x, rowBytes, wPtr + n * wRowBytes, wRowBytes, y + n * 4, yRowBytes, K);
      for (; n < n1; n++) t4x1(x, rowBytes, wPtr + n * wRowBytes, wRowBytes, y + n * 4, yRowBytes, K);
    }
    for (; t < T; t++) {
      const x = xPtr + t * rowBytes;
      const y = yPtr + t * yRowBytes;
      let n = n0;
      for (; n + 8 <= n1; n += 8) t1x8(x, rowBytes, wPtr + n * wRowBytes, wRowBytes, y + n * 4, yRowBytes, K);
      for (; n < n1; n++) t1x1(x, rowBytes, wPtr + n * wRowBytes, wRowBytes, y + n * 4, yRowBytes, K);
    }
  };
}
