// A GGUF file (llama.cpp's format): the header through @huggingface/gguf, the tensor data by positioned fs reads.
import { closeSync, existsSync, fstatSync, openSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { gguf } from '@huggingface/gguf';
import { ModelLoadError, describeError } from './errors.js';
import { dequantize, ggmlBytes, ggmlTypeName, GGML_TYPES, type GgmlTypeName } from './gguf-quants.js';

export type GgufValue = string | number | bigint | boolean | GgufValue[];

export interface GgufTensor {
  name: string;
  type: GgmlTypeName;
  /** Row-major, outermost first (GGUF stores ne[0], the innermost, first: reversed here). */
  shape: number[];
  numElements: number;
  /** The file holding it (a split model's shard), its absolute byte offset there, and the byte count. */
  file: string;
  offset: number;
  numBytes: number;
}

const SUPPORTED = Object.keys(GGML_TYPES).join(', ');

/** A split model's shard name (llama.cpp's gguf-split): base, shard k (1-based), shard count. */
export const GGUF_SHARD = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** Shard k (1-based) of n: <base>-0000k-of-0000n.gguf. */
export function ggufShardName(base: string, k: number, n: number): string {
  return `${base}-${String(k).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.gguf`;
}

export class GgufFile {
  private constructor(
    readonly file: string,
    readonly metadata: ReadonlyMap<string, GgufValue>,
    readonly tensors: ReadonlyMap<string, GgufTensor>,
  ) {}

  /**
   * Parses the header and checks every tensor's type and that its data lies inside the file. A shard of a split
   * model (llama.cpp's gguf-split: <base>-0000k-of-0000n.gguf, any of them) opens the whole model: every shard's
   * tensors, the first shard's metadata.
   */
  static async open(file: string): Promise<GgufFile> {
    const one = await GgufFile.openOne(file);
    const count = one.metadata.get('split.count');
    if (count === undefined || Number(count) <= 1) return one;
    return GgufFile.openShards(one, Number(count));
  }

  /** Every shard of the split model `given` is one of (split.count `n`; itself not parsed again), checked against each other. */
  private static async openShards(given: GgufFile, n: number): Promise<GgufFile> {
    const file = given.file;
    const m = GGUF_SHARD.exec(file);
    if (m === null || Number(m[3]) !== n) {
      throw new ModelLoadError(file, `metadata "split.count" is ${n}, but the file is not named <base>-0000k-of-${String(n).padStart(5, '0')}.gguf`);
    }
    const tensors = new Map<string, GgufTensor>();
    let metadata: ReadonlyMap<string, GgufValue> = new Map();
    let total = 0;
    for (let k = 1; k <= n; k++) {
      const shard = ggufShardName(m[1]!, k, n);
      if (!existsSync(shard)) throw new ModelLoadError(file, `shard ${basename(shard)} of ${n} is missing`);
      const g = shard === file ? given : await GgufFile.openOne(shard);
      const [no, count] = [g.metadata.get('split.no'), g.metadata.get('split.count')];
      if (Number(no) !== k - 1 || Number(count) !== n) {
        throw new ModelLoadError(shard, `metadata "split.no" ${String(no)} and "split.count" ${String(count)} are not shard ${k} of ${n} its name says`);
      }
      for (const [name, t] of g.tensors) {
        if (tensors.has(name)) throw new ModelLoadError(shard, `tensor ${name} is also in ${basename(tensors.get(name)!.file)}`);
        tensors.set(name, t);
      }
      if (k === 1) {
        metadata = g.metadata;
        total = Number(g.metadata.get('split.tensors.count') ?? NaN);
      }
    }
    if (tensors.size !== total) {
      throw new ModelLoadError(file, `the ${n} shards hold ${tensors.size} tensors, but "split.tensors.count" says ${total}`);
    }
    return new GgufFile(ggufShardName(m[1]!, 1, n), metadata, tensors);
  }

  private static async openOne(file: string): Promise<GgufFile> {
    let parsed: Awaited<ReturnType<typeof gguf>>;
    try {
      parsed = await gguf(file, { allowLocalFile: true });
    } catch (err) {
      const why = describeError(err);
      // the parser reads past the end of a truncated header as a RangeError (DataView)
      const truncated = err instanceof RangeError || /out of bounds|outside the bounds/i.test(why);
      throw new ModelLoadError(file, truncated ? `the header is truncated (${why})`
        : /magic/i.test(why) ? 'bad magic: not a GGUF file (it does not start with "GGUF")' : `cannot parse the GGUF header: ${why}`,
      { cause: err });
    }
    const metadata = new Map<string, GgufValue>();
    for (const [k, v] of Object.entries(parsed.metadata)) metadata.set(k, v as GgufValue);
    const fd = openSync(file, 'r');
    const fileBytes = fstatSync(fd).size;
    closeSync(fd);
    const dataStart = Number(parsed.tensorDataOffset);
    // the parser does not notice a header cut short (it reads zeros past the end): its own end must lie in the file
    if (parsed.tensorInfoByteRange[1] > fileBytes || dataStart > fileBytes) {
      throw new ModelLoadError(file, `the header is truncated: it runs to byte ${Math.max(parsed.tensorInfoByteRange[1], dataStart)}, ` +
        `the file has ${fileBytes}`);
    }
    const tensors = new Map<string, GgufTensor>();
    for (const t of parsed.tensorInfos) {
      const type = ggmlTypeName(t.dtype);
      if (type === undefined) {
        throw new ModelLoadError(file, `tensor ${t.name} has GGML type ${t.dtype}, which is not supported (supported: ${SUPPORTED})`);
      }
      const shape = t.shape.map(Number).reverse();
      const numElements = shape.reduce((a, b) => a * b, 1);
      const block = GGML_TYPES[type].blockElems;
      if (shape.at(-1)! % block !== 0) {
        throw new ModelLoadError(file, `tensor ${t.name} is ${type} [${shape.join(', ')}]: its rows are not whole blocks of ${block}`);
      }
      const offset = dataStart + Number(t.offset);
      const numBytes = ggmlBytes(type, numElements);
      if (offset + numBytes > fileBytes) {
        throw new ModelLoadError(file, `tensor ${t.name}'s data ends at byte ${offset + numBytes}, past the end of the file ` +
          `(${fileBytes} bytes): the file is truncated`);
      }
      tensors.set(t.name, { name: t.name, type, shape, numElements, file, offset, numBytes });
    }
    return new GgufFile(file, metadata, tensors);
  }

  /** Tensor `name`'s values as f32 (dequantized as ggml does). */
  readF32(name: string): Float32Array {
    const t = this.tensor(name);
    return dequantize(t.type, this.readRaw(name), t.numElements);
  }

  /** Tensor `name`'s bytes as stored (blocks of its type). */
  readRaw(name: string): Uint8Array {
    return this.readRawRange(name, 0, this.tensor(name).numBytes);
  }

  /**
   * Elements [start, start + count) of tensor `name` as f32: one expert's slab of a stacked [E, rows, cols] tensor.
   * Both must be whole blocks of its type (a slab of whole rows is).
   */
  readSliceF32(name: string, start: number, count: number): Float32Array {
    const t = this.tensor(name);
    const { blockElems, blockBytes } = GGML_TYPES[t.type];
    if (start % blockElems !== 0 || count % blockElems !== 0 || start + count > t.numElements) {
      throw new ModelLoadError(this.file, `tensor ${name}: elements [${start}, ${start + count}) are not whole ${t.type} blocks of it`);
    }
    return dequantize(t.type, this.readRawRange(name, (start / blockElems) * blockBytes, (count / blockElems) * blockBytes), count);
  }

  private readRawRange(name: string, from: number, numBytes: number): Uint8Array {
    const t = this.tensor(name);
    const bytes = new Uint8Array(numBytes);
    const fd = openSync(t.file, 'r');
    try {
      let done = 0;
      while (done < numBytes) {
        const n = readSync(fd, bytes, done, numBytes - done, t.offset + from + done);
        if (n === 0) throw new ModelLoadError(t.file, `tensor ${name}: the file ended while reading it (truncated)`);
        done += n;
      }
    } finally {
      closeSync(fd);
    }
    return bytes;
  }

  private tensor(name: string): GgufTensor {
    const t = this.tensors.get(name);
    if (t === undefined) throw new ModelLoadError(this.file, `no tensor ${name}`);
    return t;
  }
}
