import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { BYTES_PER_ELEMENT, dtypeFromSafetensors } from './dtype.js';
import { ModelLoadError, describeError } from './errors.js';
import type { DType, HostTensor, WeightSource } from './types.js';

/*
 * safetensors file:
 *   [u64 LE headerBytes][header JSON, headerBytes long][data ...]
 *   header: { name: { dtype, shape, data_offsets: [begin, end) relative to data start }, __metadata__? }
 */

export interface TensorEntry {
  name: string;
  dtype: DType;
  shape: number[];
  file: string;
  /** Absolute byte range in the file. */
  begin: number;
  end: number;
}

const MAX_HEADER_BYTES = 100 * 1024 * 1024;
const MAX_READ_BYTES = 1 << 30;

function readExactly(fd: number, target: Uint8Array, position: number, file: string): void {
  let numRead = 0;
  while (numRead < target.byteLength) {
    const want = Math.min(target.byteLength - numRead, MAX_READ_BYTES);
    const got = readSync(fd, target, numRead, want, position + numRead);
    if (got === 0) {
      throw new ModelLoadError(file, `unexpected end of file at byte ${position + numRead}: the file is truncated`);
    }
    numRead += got;
  }
}

function isNonNegativeInt(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}

/** The integer and bool dtypes a checkpoint may hold beside its weights (an EAGLE-3 head's d2t and t2d), and their sizes. */
const INDEX_DTYPES: Readonly<Record<string, number>> = { I64: 8, I32: 4, BOOL: 1 };

/** A tensor of an integer or bool dtype, which no weight path takes: its safetensors dtype and its bytes as stored. */
export interface IndexTensor {
  name: string;
  dtype: 'I64' | 'I32' | 'BOOL';
  shape: number[];
  data: Uint8Array;
}

/**
 * Parses one safetensors file's header and checks every entry against the file's size. `indexEntries`: where an entry
 * of an integer or bool dtype goes (readIndexedSafetensors); without it such an entry is an error, as any dtype no
 * weight path takes.
 */
export function readSafetensorsHeader(file: string, indexEntries?: TensorEntry[]): TensorEntry[] {
  if (!existsSync(file)) throw new ModelLoadError(file, 'file not found');
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw new ModelLoadError(file, `cannot open: ${describeError(err)}`, { cause: err });
  }
  try {
    const fileBytes = fstatSync(fd).size;
    if (fileBytes < 8) throw new ModelLoadError(file, `file is ${fileBytes} bytes, too short for the 8-byte header length`);
    const lengthBytes = new Uint8Array(8);
    readExactly(fd, lengthBytes, 0, file);
    const headerBytesBig = new DataView(lengthBytes.buffer).getBigUint64(0, true);
    if (headerBytesBig > BigInt(Math.min(MAX_HEADER_BYTES, fileBytes - 8))) {
      throw new ModelLoadError(
        file,
        `header length ${headerBytesBig} is larger than the file (${fileBytes} bytes) allows: not a safetensors file, or truncated`,
      );
    }
    const headerBytes = Number(headerBytesBig);
    const headerRaw = new Uint8Array(headerBytes);
    readExactly(fd, headerRaw, 8, file);
    let header: unknown;
    try {
      header = JSON.parse(new TextDecoder().decode(headerRaw));
    } catch (err) {
      throw new ModelLoadError(file, `header is not valid JSON: ${describeError(err)}`, { cause: err });
    }
    if (typeof header !== 'object' || header === null || Array.isArray(header)) {
      throw new ModelLoadError(file, 'header is not a JSON object');
    }
    const dataStart = 8 + headerBytes;
    const entries: TensorEntry[] = [];
    for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
      if (name === '__metadata__') continue;
      const dtypeRaw = (raw as { dtype?: unknown } | null)?.dtype;
      if (indexEntries && typeof dtypeRaw === 'string' && dtypeRaw in INDEX_DTYPES) {
        indexEntries.push(parseEntry(file, name, raw, dataStart, fileBytes, INDEX_DTYPES[dtypeRaw]));
      } else {
        entries.push(parseEntry(file, name, raw, dataStart, fileBytes));
      }
    }
    return entries;
  } finally {
    closeSync(fd);
  }
}

/** `indexBytes`: an integer or bool entry's element size (its dtype kept as f32 in the entry, never read as one). */
function parseEntry(file: string, name: string, raw: unknown, dataStart: number, fileBytes: number,
  indexBytes?: number): TensorEntry {
  const where = `tensor "${name}"`;
  if (typeof raw !== 'object' || raw === null) throw new ModelLoadError(file, `${where}: header entry is not an object`);
  const { dtype: dtypeRaw, shape, data_offsets: offsets } = raw as Record<string, unknown>;
  if (typeof dtypeRaw !== 'string') throw new ModelLoadError(file, `${where}: missing dtype`);
  const dtype = indexBytes !== undefined ? 'f32' : dtypeFromSafetensors(dtypeRaw);
  if (dtype === null) {
    throw new ModelLoadError(file, `${where} has dtype ${dtypeRaw}, which is not supported (BF16, F16, F32, F8_E4M3)`);
  }
  if (!Array.isArray(shape) || !shape.every(isNonNegativeInt)) {
    throw new ModelLoadError(file, `${where}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
  }
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isNonNegativeInt) || offsets[0] > offsets[1]) {
    throw new ModelLoadError(file, `${where}: data_offsets ${JSON.stringify(offsets)} is not [begin, end] with begin <= end`);
  }
  const [begin, end] = offsets as [number, number];
  const numElements = (shape as number[]).reduce((a, b) => a * b, 1);
  const expectedBytes = numElements * (indexBytes ?? BYTES_PER_ELEMENT[dtype]);
  if (end - begin !== expectedBytes) {
    throw new ModelLoadError(
      file,
      `${where} data [${begin}, ${end}) is ${end - begin} bytes, but shape [${shape.join(', ')}] of ${dtypeRaw} needs ${expectedBytes}`,
    );
  }
  if (dataStart + end > fileBytes) {
    throw new ModelLoadError(
      file,
      `${where} data [${begin}, ${end}) lies beyond the end of the file (${fileBytes} bytes): the file is truncated`,
    );
  }
  return { name, dtype, shape: shape as number[], file, begin: dataStart + begin, end: dataStart + end };
}

/** Called after every read of tensor bytes (load-progress.ts shows the progress of a load from it); one per thread. */
let onWeightsRead: ((name: string, numBytes: number) => void) | null = null;

export function setWeightsReadListener(listener: ((name: string, numBytes: number) => void) | null): void {
  onWeightsRead = listener;
}

/** Tensors of one safetensors file or of a sharded checkpoint, read on demand with positioned reads. */
export class SafetensorsWeights implements WeightSource {
  private readonly entries: Map<string, TensorEntry>;

  constructor(entries: Iterable<TensorEntry>) {
    this.entries = new Map();
    for (const e of entries) this.entries.set(e.name, e);
  }

  names(): string[] {
    return [...this.entries.keys()];
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  entry(name: string): TensorEntry {
    const e = this.entries.get(name);
    if (e === undefined) {
      const files = [...new Set([...this.entries.values()].map((x) => basename(x.file)))].join(', ');
      throw new ModelLoadError(files || 'weights', `tensor "${name}" not found`);
    }
    return e;
  }

  info(name: string): { dtype: DType; shape: number[]; file: string } {
    const e = this.entry(name);
    return { dtype: e.dtype, shape: [...e.shape], file: e.file };
  }

  readInto(name: string, offset: number, dest: Uint8Array): void {
    const e = this.entry(name);
    if (offset < 0 || offset + dest.byteLength > e.end - e.begin) {
      throw new RangeError(`readInto ${name}: bytes [${offset}, ${offset + dest.byteLength}) of ${e.end - e.begin}`);
    }
    this.readRange(e, e.begin + offset, dest);
  }

  private readRange(e: TensorEntry, position: number, data: Uint8Array): void {
    let fd: number;
    try {
      fd = openSync(e.file, 'r');
    } catch (err) {
      throw new ModelLoadError(e.file, `cannot open: ${describeError(err)}`, { cause: err });
    }
    try {
      readExactly(fd, data, position, e.file);
    } finally {
      closeSync(fd);
    }
    onWeightsRead?.(e.name, data.byteLength);
  }

  read(name: string): HostTensor {
    const e = this.entry(name);
    const data = new Uint8Array(e.end - e.begin);
    this.readRange(e, e.begin, data);
    return { name, dtype: e.dtype, shape: [...e.shape], data };
  }
}

export function openSafetensors(file: string): SafetensorsWeights {
  return new SafetensorsWeights(readSafetensorsHeader(file));
}

/**
 * One safetensors file whose integer and bool tensors (an EAGLE-3 head's d2t, t2d) are read whole here and left out of
 * the weights (the float tensors, read on demand as openSafetensors' are).
 */
export function openIndexedSafetensors(file: string): { weights: SafetensorsWeights; indices: Map<string, IndexTensor> } {
  const raw: TensorEntry[] = [];
  const weights = new SafetensorsWeights(readSafetensorsHeader(file, raw));
  const header = JSON.parse(readHeaderText(file)) as Record<string, { dtype: IndexTensor['dtype'] }>;
  const indices = new Map(raw.map((e) => {
    const data = new Uint8Array(e.end - e.begin);
    const fd = openSync(file, 'r');
    try {
      readExactly(fd, data, e.begin, file);
    } finally {
      closeSync(fd);
    }
    return [e.name, { name: e.name, dtype: header[e.name]!.dtype, shape: [...e.shape], data }];
  }));
  return { weights, indices };
}

/** The header's JSON text (readSafetensorsHeader has checked it). */
function readHeaderText(file: string): string {
  const fd = openSync(file, 'r');
  try {
    const lengthBytes = new Uint8Array(8);
    readExactly(fd, lengthBytes, 0, file);
    const text = new Uint8Array(Number(new DataView(lengthBytes.buffer).getBigUint64(0, true)));
    readExactly(fd, text, 8, file);
    return new TextDecoder().decode(text);
  } finally {
    closeSync(fd);
  }
}

/** model.safetensors.index.json: { metadata?, weight_map: { tensor: shard file } }. */
export function openShardedSafetensors(indexFile: string): SafetensorsWeights {
  let index: unknown;
  try {
    index = JSON.parse(readFileSync(indexFile, 'utf8'));
  } catch (err) {
    throw new ModelLoadError(indexFile, `cannot read the index: ${describeError(err)}`, { cause: err });
  }
  const weightMap = (index as { weight_map?: unknown } | null)?.weight_map;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    throw new ModelLoadError(indexFile, 'weight_map is missing or not an object');
  }
  const dir = dirname(indexFile);
  const shardFiles = new Map<string, Map<string, TensorEntry>>();
  for (const shard of new Set(Object.values(weightMap as Record<string, unknown>))) {
    if (typeof shard !== 'string') throw new ModelLoadError(indexFile, `weight_map value ${JSON.stringify(shard)} is not a file name`);
    const path = join(dir, shard);
    if (!existsSync(path)) throw new ModelLoadError(indexFile, `weight_map references shard "${shard}", which does not exist`);
    shardFiles.set(shard, new Map(readSafetensorsHeader(path).map((e) => [e.name, e])));
  }
  const entries: TensorEntry[] = [];
  for (const [name, shard] of Object.entries(weightMap as Record<string, string>)) {
    const e = shardFiles.get(shard)!.get(name);
    if (e === undefined) throw new ModelLoadError(join(dir, shard), `tensor "${name}" listed in the index is not in this shard`);
    entries.push(e);
  }
  return new SafetensorsWeights(entries);
}
