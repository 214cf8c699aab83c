// A small WebAssembly assembler: the encodings the CPU kernels need, and the
// slice of the WebAssembly API they use (tsconfig's libs do not declare it).

export interface WasmMemory {
  readonly buffer: SharedArrayBuffer;
  grow(numPages: number): number;
}
/** A compiled module: opaque, structured-clonable to workers. */
export type WasmModule = object;
export interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  Module: new (bytes: Uint8Array) => WasmModule;
  Instance: new (module: WasmModule, imports: object) => { exports: Record<string, unknown> };
  Memory: new (desc: { initial: number; maximum: number; shared: boolean }) => WasmMemory;
}
export const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

export function createSharedMemory(initialPages: number): WasmMemory {
  return new wasm.Memory({ initial: initialPages, maximum: WASM_MAX_PAGES, shared: true });
}

/** 4 GiB: all a wasm32 memory can address. */
export const WASM_MAX_PAGES = 65536;
export const WASM_PAGE_BYTES = 65536;

export const I32 = 0x7f;
export const F32 = 0x7d;
export const V128 = 0x7b;

export function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
}

export function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0)) return [...out, b];
    out.push(b | 0x80);
  }
}

export const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
export const section = (id: number, bytes: number[]): number[] => [id, ...uleb(bytes.length), ...bytes];
export const name = (s: string): number[] => [...uleb(s.length), ...Buffer.from(s, 'utf8')];
export const get = (i: number): number[] => [0x20, ...uleb(i)];
export const set = (i: number): number[] => [0x21, ...uleb(i)];
export const i32 = (v: number): number[] => [0x41, ...sleb(v)];
export const simd = (op: number): number[] => [0xfd, ...uleb(op)];
export const OP = {
  i32Load: 0x28, v128Store: 11, v128Const: 12, f32x4Splat: 19, f32Const: 0x43,
  i32Add: 0x6a, i32Mul: 0x6c, i32And: 0x71, i32Shl: 0x74, i32GeU: 0x4f, f32Add: 0x92, f32Mul: 0x94,
  f32Load: 0x2a, f32Store: 0x38, block: 0x02, loop: 0x03, br: 0x0c, brIf: 0x0d, end: 0x0b, void: 0x40,
  v128Load: 0, f32x4ExtractLane: 0x1f, f32x4Add: 228, f32x4Mul: 230,
  v128Load16x4U: 4, i32x4Shl: 171, i32x4ExtendLowI16x8U: 169, i32x4ExtendHighI16x8U: 170,
  i32Load16U: 0x2f, i32ShrU: 0x76, f32ReinterpretI32: 0xbe,
} as const;

/** `for (; kb < to; kb += step) body` over locals kb, to (unsigned). */
export function loop(kb: number, to: number, step: number, body: number[]): number[] {
  return [OP.block, OP.void, OP.loop, OP.void, ...get(kb), ...get(to), OP.i32GeU, OP.brIf, 1,
    ...body, ...get(kb), ...i32(step), OP.i32Add, ...set(kb), OP.br, 0, OP.end, OP.end];
}


export interface WasmFunc {
  name: string;
  params: number[];
  results: number[];
  /** Local declarations then instructions, without the size prefix and final end. */
  locals: [number, number][];
  body: number[];
}

/** A module of exported functions over one imported shared memory env.memory. */
export function assembleModule(funcs: WasmFunc[]): Uint8Array {
  const types = funcs.map((f) => [0x60, ...vec(f.params.map((t) => [t])), ...vec(f.results.map((t) => [t]))]);
  const code = funcs.map((f) => {
    const bytes = [...vec(f.locals.map(([n, t]) => [...uleb(n), t])), ...f.body, OP.end];
    return [...uleb(bytes.length), ...bytes];
  });
  return new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec(types)),
    ...section(2, vec([[...name('env'), ...name('memory'), 0x02, 0x03, ...uleb(1), ...uleb(WASM_MAX_PAGES)]])),
    ...section(3, vec(funcs.map((_, i) => uleb(i)))),
    ...section(7, vec(funcs.map((f, i) => [...name(f.name), 0x00, ...uleb(i)]))),
    ...section(10, vec(code)),
  ]);
}
