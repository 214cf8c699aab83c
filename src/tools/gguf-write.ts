// A GGUF writer and GGML quantizers, for test models (make-test-model --format gguf). They need only produce valid
// blocks whose error stays within each format's bound, not llama.cpp's searched scales; hand-written, as no maintained
// JS library quantizes to GGML blocks.
import { closeSync, openSync, writeSync } from 'node:fs';
import { f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../loader/dtype.js';
import { GGML_TYPES, type GgmlTypeName } from '../loader/gguf-quants.js';

export type GgufMetaValue =
  | { type: 'u16' | 'u32' | 'f32' | 'i32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'array'; of: 'string'; value: string[] }
  | { type: 'array'; of: 'i32' | 'f32'; value: number[] };

export interface GgufTensorOut {
  name: string;
  type: GgmlTypeName;
  /** Row-major, outermost first (written reversed, as GGUF's ne[]). */
  shape: number[];
  data: Uint8Array;
}

const VALUE_TYPES = { u16: 2, u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9, u64: 10 } as const;
const ALIGNMENT = 32;

class Bytes {
  private chunks: Uint8Array[] = [];
  length = 0;
  push(b: Uint8Array): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  u16(v: number): void { const b = new Uint8Array(2); new DataView(b.buffer).setUint16(0, v, true); this.push(b); }
  u32(v: number): void { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); this.push(b); }
  i32(v: number): void { const b = new Uint8Array(4); new DataView(b.buffer).setInt32(0, v, true); this.push(b); }
  f32(v: number): void { const b = new Uint8Array(4); new DataView(b.buffer).setFloat32(0, v, true); this.push(b); }
  u64(v: number): void { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(v), true); this.push(b); }
  str(s: string): void { const b = new TextEncoder().encode(s); this.u64(b.length); this.push(b); }
  pad(): void { const n = (ALIGNMENT - (this.length % ALIGNMENT)) % ALIGNMENT; if (n) this.push(new Uint8Array(n)); }
  concat(): Uint8Array {
    const out = new Uint8Array(this.length);
    let o = 0;
    for (const c of this.chunks) { out.set(c, o); o += c.length; }
    return out;
  }
}

function writeValue(b: Bytes, v: GgufMetaValue): void {
  switch (v.type) {
    case 'u16': return b.u16(v.value);
    case 'u32': return b.u32(v.value);
    case 'i32': return b.i32(v.value);
    case 'f32': return b.f32(v.value);
    case 'bool': return b.push(new Uint8Array([v.value ? 1 : 0]));
    case 'string': return b.str(v.value);
    case 'array':
      b.u32(VALUE_TYPES[v.of]);
      b.u64(v.value.length);
      for (const x of v.value) {
        if (v.of === 'string') b.str(x as string);
        else if (v.of === 'i32') b.i32(x as number);
        else b.f32(x as number);
      }
  }
}

/** Writes a GGUF v3 file: header, metadata, tensor infos, then each tensor's data aligned to 32 bytes. */
export function writeGguf(file: string, metadata: [string, GgufMetaValue][], tensors: GgufTensorOut[]): void {
  const w = openGgufWriter(file, metadata, tensors);
  try {
    for (const t of tensors) w.write(t.data);
  } finally {
    w.close();
  }
}

/** A tensor's bytes in a GGUF file of its type, before padding. */
export function ggufTensorBytes(type: GgmlTypeName, shape: readonly number[]): number {
  const t = GGML_TYPES[type];
  return (shape.reduce((a, b) => a * b, 1) / t.blockElems) * t.blockBytes;
}

/**
 * writeGguf a tensor at a time: the header (every tensor's offset follows from its type and shape) at once, then
 * each tensor's data, in the order of `tensors`, as write() is handed it, so a file of gigabytes never sits in memory.
 */
export function openGgufWriter(file: string, metadata: [string, GgufMetaValue][],
  tensors: readonly Omit<GgufTensorOut, 'data'>[]): { write(data: Uint8Array): void; close(): void } {
  const h = new Bytes();
  h.push(new TextEncoder().encode('GGUF'));
  h.u32(3);
  h.u64(tensors.length);
  h.u64(metadata.length);
  for (const [key, v] of metadata) {
    h.str(key);
    h.u32(VALUE_TYPES[v.type]);
    writeValue(h, v);
  }
  let offset = 0;
  for (const t of tensors) {
    h.str(t.name);
    h.u32(t.shape.length);
    for (const d of [...t.shape].reverse()) h.u64(d);
    h.u32(GGML_TYPES[t.type].id);
    h.u64(offset);
    offset += Math.ceil(ggufTensorBytes(t.type, t.shape) / ALIGNMENT) * ALIGNMENT;
  }
  h.pad();
  const fd = openSync(file, 'w');
  let next = 0;
  try {
    writeSync(fd, h.concat());
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return {
    write(data: Uint8Array): void {
      const t = tensors[next];
      if (t === undefined) throw new Error(`GGUF writer: more tensors than the ${tensors.length} of the header`);
      if (data.length !== ggufTensorBytes(t.type, t.shape)) {
        throw new Error(`GGUF writer: ${t.name} has ${data.length} bytes, not those of ${t.type} [${t.shape.join(', ')}]`);
      }
      writeSync(fd, data);
      const pad = (ALIGNMENT - (data.length % ALIGNMENT)) % ALIGNMENT;
      if (pad) writeSync(fd, new Uint8Array(pad));
      next++;
    },
    close(): void {
      closeSync(fd);
      if (next !== tensors.length) throw new Error(`GGUF writer: ${next} of ${tensors.length} tensors written to ${file}`);
    },
  };
}

const fr = Math.fround;

/** The smallest f16 at or above x >= 0 (so a scale computed from it never clips). */
function f16Up(x: number): number {
  let bits = f32ToF16Bits(x);
  if (f16BitsToF32(bits) < x) bits += 1;
  return bits;
}

function setHalf(out: Uint8Array, o: number, bits: number): void {
  out[o] = bits & 0xff;
  out[o + 1] = bits >> 8;
}

function q8_0(x: Float32Array, out: Uint8Array): void {
  for (let i = 0; i < x.length / 32; i++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[i * 32 + j]!));
    const dBits = f16Up(amax / 127), d = f16BitsToF32(dBits);
    setHalf(out, i * 34, dBits);
    for (let j = 0; j < 32; j++) out[i * 34 + 2 + j] = (d ? Math.max(-127, Math.min(127, Math.round(x[i * 32 + j]! / d))) : 0) & 0xff;
  }
}

function q4_0(x: Float32Array, out: Uint8Array): void {
  for (let i = 0; i < x.length / 32; i++) {
    let max = 0;
    for (let j = 0; j < 32; j++) if (Math.abs(x[i * 32 + j]!) > Math.abs(max)) max = x[i * 32 + j]!;
    const dBits = f32ToF16Bits(max / -8), d = f16BitsToF32(dBits);
    setHalf(out, i * 18, dBits);
    const q = (v: number): number => d ? Math.max(0, Math.min(15, Math.round(v / d) + 8)) : 8;
    for (let j = 0; j < 16; j++) out[i * 18 + 2 + j] = q(x[i * 32 + j]!) | (q(x[i * 32 + j + 16]!) << 4);
  }
}

/** Q4_K (levels 15) and Q5_K (31): per 32-value sub-block a 6-bit scale and min of the block's f16 d and dmin. */
function qK(x: Float32Array, out: Uint8Array, five: boolean): void {
  const nmax = five ? 31 : 15, size = five ? 176 : 144;
  for (let i = 0; i < x.length / 256; i++) {
    const v = x.subarray(i * 256, (i + 1) * 256), o = i * size;
    const mins: number[] = [], maxs: number[] = [];
    for (let j = 0; j < 8; j++) {
      let mn = 0, mx = 0;
      for (let l = 0; l < 32; l++) { mn = Math.min(mn, v[j * 32 + l]!); mx = Math.max(mx, v[j * 32 + l]!); }
      mins.push(mn); maxs.push(mx);
    }
    const dminBits = f16Up(Math.max(...mins.map((m) => -m)) / 63), dmin = f16BitsToF32(dminBits);
    const dBits = f16Up(Math.max(...maxs.map((mx, j) => mx - mins[j]! + dmin)) / (nmax * 63)), d = f16BitsToF32(dBits);
    setHalf(out, o, dBits);
    setHalf(out, o + 2, dminBits);
    const ms = mins.map((mn) => dmin ? Math.min(63, Math.ceil(-mn / dmin)) : 0);
    const scs = maxs.map((mx, j) => d ? Math.min(63, Math.ceil((mx + fr(dmin * ms[j]!)) / (nmax * d))) : 0);
    for (let j = 0; j < 4; j++) {
      out[o + 4 + j] = scs[j]! | ((scs[j + 4]! >> 4) << 6);
      out[o + 8 + j] = ms[j]! | ((ms[j + 4]! >> 4) << 6);
      out[o + 12 + j] = (scs[j + 4]! & 0xf) | ((ms[j + 4]! & 0xf) << 4);
    }
    const L = new Uint8Array(256);
    for (let j = 0; j < 8; j++) {
      const d1 = fr(d * scs[j]!), m1 = fr(dmin * ms[j]!);
      for (let l = 0; l < 32; l++) L[j * 32 + l] = d1 ? Math.max(0, Math.min(nmax, Math.round((v[j * 32 + l]! + m1) / d1))) : 0;
    }
    const qs = o + (five ? 48 : 16);
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++) {
        const lo = L[c * 64 + l]!, hi = L[c * 64 + 32 + l]!;
        out[qs + c * 32 + l] = (lo & 0xf) | ((hi & 0xf) << 4);
        if (five) out[o + 16 + l]! |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
      }
    }
  }
}

/** Q6_K: per 16-value sub-block an int8 scale of the block's f16 d; values -32..31. */
function q6K(x: Float32Array, out: Uint8Array): void {
  for (let i = 0; i < x.length / 256; i++) {
    const v = x.subarray(i * 256, (i + 1) * 256), o = i * 210;
    const s: number[] = [];
    for (let j = 0; j < 16; j++) {
      let amax = 0;
      for (let l = 0; l < 16; l++) amax = Math.max(amax, Math.abs(v[j * 16 + l]!));
      s.push(amax / 31);
    }
    const dBits = f16Up(Math.max(...s) / 127), d = f16BitsToF32(dBits);
    setHalf(out, o + 208, dBits);
    const L = new Uint8Array(256);
    for (let j = 0; j < 16; j++) {
      const sc = d ? Math.min(127, Math.ceil(s[j]! / d)) : 0;
      out[o + 192 + j] = sc;
      const d1 = fr(d * sc);
      for (let l = 0; l < 16; l++) L[j * 16 + l] = (d1 ? Math.max(-32, Math.min(31, Math.round(v[j * 16 + l]! / d1))) : 0) + 32;
    }
    for (let n = 0; n < 2; n++) {
      for (let l = 0; l < 32; l++) {
        const b = n * 128 + l;
        out[o + n * 64 + l] = (L[b]! & 0xf) | ((L[b + 64]! & 0xf) << 4);
        out[o + n * 64 + l + 32] = (L[b + 32]! & 0xf) | ((L[b + 96]! & 0xf) << 4);
        out[o + 128 + n * 32 + l] = (L[b]! >> 4) | ((L[b + 32]! >> 4) << 2) | ((L[b + 64]! >> 4) << 4) | ((L[b + 96]! >> 4) << 6);
      }
    }
  }
}

/** x as `type`'s blocks (x.length a multiple of the type's block). */
export function quantize(type: GgmlTypeName, x: Float32Array): Uint8Array {
  const t = GGML_TYPES[type];
  const out = new Uint8Array((x.length / t.blockElems) * t.blockBytes);
  const dv = new DataView(out.buffer);
  switch (type) {
    case 'F32': x.forEach((v, i) => dv.setFloat32(4 * i, v, true)); break;
    case 'F16': x.forEach((v, i) => dv.setUint16(2 * i, f32ToF16Bits(v), true)); break;
    case 'BF16': x.forEach((v, i) => dv.setUint16(2 * i, f32ToBf16Bits(v), true)); break;
    case 'Q8_0': q8_0(x, out); break;
    case 'Q4_0': q4_0(x, out); break;
    case 'Q4_K': qK(x, out, false); break;
    case 'Q5_K': qK(x, out, true); break;
    case 'Q6_K': q6K(x, out); break;
  }
  return out;
}
