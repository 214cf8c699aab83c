// Fused weights as parts: a weight the layers take fused (q | k | v, a DeltaNet layer's four input projections, a
// layer's experts side by side) or cut (Qwen3.5's query rows without their gate rows) is described as parts, each a
// checkpoint tensor whole or some of its rows, and planned here as byte ranges of the checkpoint. A backend with
// uploadSegments (CUDA: pinned staging buffers, the file read overlapping the copies: weight-upload.ts) copies those
// ranges from the file to the device with no host copy of the whole weight; any other backend (the CPU) gets the same
// bytes gathered on the host. One plan serves both, so the two cannot disagree on a byte.
//
// A part is viewed as rows: a 1-D tensor as its elements, any other as [elements / last dimension, last dimension]
// (the fused experts' [E, N, K] as E N rows of K; conv1d's [C, 1, K] as C rows of K). The planned weight is 1-D when
// its parts are, else [rows, last dimension].

import type { Backend, Tensor } from '../../backend/backend.js';
import { BYTES_PER_ELEMENT } from '../../loader/dtype.js';
import type { ByteSegment, DType, HostTensor, WeightSource } from '../../loader/types.js';

/** Half-open row ranges [begin, end), in the order they are taken. */
export type RowRanges = readonly (readonly [number, number])[];

/** A checkpoint tensor's rows (`rows`), or the whole of it. */
export type WeightPart = string | { name: string; rows: RowRanges };

export interface PartsPlan {
  dtype: DType;
  shape: number[];
  segments: ByteSegment[];
}

/** An index list as the fewest row ranges taking its rows in its order ([0, 1, 2, 7, 8] -> [0, 3], [7, 9]). */
export function rowRuns(order: readonly number[]): [number, number][] {
  const runs: [number, number][] = [];
  for (const r of order) {
    const last = runs.at(-1);
    if (last && last[1] === r) last[1]++;
    else runs.push([r, r + 1]);
  }
  return runs;
}

/** The byte ranges of the weight `name` fused from `parts`, its dtype and shape; refuses parts that cannot fuse. */
export function planParts(source: Pick<WeightSource, 'info'>, name: string, parts: readonly WeightPart[]): PartsPlan {
  if (parts.length === 0) throw new Error(`${name}: no parts`);
  let dtype: DType | null = null;
  let rank1: boolean | null = null;
  let width = 0;
  let numRows = 0;
  const segments: ByteSegment[] = [];
  for (const part of parts) {
    const tensor = typeof part === 'string' ? part : part.name;
    const info = source.info(tensor);
    const elements = info.shape.reduce((a, b) => a * b, 1);
    const isRank1 = info.shape.length === 1;
    const w = isRank1 ? 1 : info.shape.at(-1)!;
    if (dtype === null) [dtype, rank1, width] = [info.dtype, isRank1, w];
    if (info.dtype !== dtype || isRank1 !== rank1 || w !== width) {
      throw new Error(`${name}: part ${tensor} is ${info.dtype}[${info.shape.join(', ')}], not of the first part's `
        + `dtype and row width (${dtype}, ${width})`);
    }
    const rowBytes = w * BYTES_PER_ELEMENT[info.dtype];
    const rowsOf = elements / w;
    const ranges = typeof part === 'string' ? [[0, rowsOf] as const] : part.rows;
    for (const [begin, end] of ranges) {
      if (!(Number.isInteger(begin) && Number.isInteger(end) && begin >= 0 && begin < end && end <= rowsOf)) {
        throw new Error(`${name}: rows [${begin}, ${end}) of ${tensor}, which has ${rowsOf}`);
      }
      const last = segments.at(-1);
      // adjacent ranges of one tensor read as one segment (a whole part is one read, as before)
      const bytes = (end - begin) * rowBytes;
      if (last && last.name === tensor && last.offset + last.bytes === begin * rowBytes) last.bytes += bytes;
      else segments.push({ name: tensor, offset: begin * rowBytes, bytes });
      numRows += end - begin;
    }
  }
  return { dtype: dtype!, shape: rank1 ? [numRows] : [numRows, width], segments };
}

/** The planned weight's bytes gathered on the host: read by ranges where the source can, else tensor by tensor. */
export function gatherParts(source: WeightSource, name: string, plan: PartsPlan): HostTensor {
  const [first] = plan.segments;
  const info = source.info(first!.name);
  const wholeBytes = info.shape.reduce((a, b) => a * b, 1) * BYTES_PER_ELEMENT[info.dtype];
  if (plan.segments.length === 1 && first!.bytes === wholeBytes) {
    const t = source.read(first!.name);  // a whole tensor as read (a GGUF file's dequantized): no copy
    return { name, dtype: t.dtype, shape: plan.shape, data: t.data };
  }
  const data = new Uint8Array(plan.segments.reduce((n, s) => n + s.bytes, 0));
  const whole = new Map<string, Uint8Array>();
  let at = 0;
  for (const s of plan.segments) {
    const dest = data.subarray(at, at + s.bytes);
    if (source.readInto) {
      source.readInto(s.name, s.offset, dest);
    } else {
      let t = whole.get(s.name);
      if (!t) whole.set(s.name, t = source.read(s.name).data);
      dest.set(t.subarray(s.offset, s.offset + s.bytes));
    }
    at += s.bytes;
  }
  return { name, dtype: plan.dtype, shape: plan.shape, data };
}

/** Uploads the weight `name` fused from `parts`. */
export type PartsUpload = (name: string, parts: readonly WeightPart[]) => Tensor;

/**
 * The loader's upload of fused weights: streamed by the backend's uploadSegments where it has one, the source reads
 * by ranges and the parts are of the backend's compute dtype (it converts nothing on the way); gathered on the host
 * and uploaded (converted) otherwise.
 */
export function partsUploader(source: WeightSource, backend: Backend): PartsUpload {
  return (name, parts) => {
    const plan = planParts(source, name, parts);
    if (backend.uploadSegments && source.readInto && plan.dtype === backend.computeDType) {
      return backend.uploadSegments(name, source, plan.segments, plan.shape);
    }
    return backend.upload(gatherParts(source, name, plan));
  };
}
