import { writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { BYTES_PER_ELEMENT, SAFETENSORS_DTYPE } from './dtype.js';
import type { DType, HostTensor } from './types.js';

export interface TensorSpec {
  name: string;
  dtype: DType;
  shape: number[];
}

/**
 * Tensors whose bytes are produced one tensor at a time, in the order of specs,
 * each as any number of chunks; the header is computed from the specs first.
 */
export interface StreamedTensors {
  specs: readonly TensorSpec[];
  chunks(spec: TensorSpec, index: number): AsyncIterable<Uint8Array> | Iterable<Uint8Array>;
}

export function tensorBytes(spec: TensorSpec): number {
  return spec.shape.reduce((a, b) => a * b, 1) * BYTES_PER_ELEMENT[spec.dtype];
}

/** The header bytes (length prefix included), padded with spaces to 8-byte alignment. */
export function safetensorsHeader(specs: readonly TensorSpec[], metadata: Record<string, string> = { format: 'pt' }): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const spec of specs) {
    const numBytes = tensorBytes(spec);
    header[spec.name] = { dtype: SAFETENSORS_DTYPE[spec.dtype], shape: spec.shape, data_offsets: [offset, offset + numBytes] };
    offset += numBytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const jsonBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + jsonBytes.byteLength);
  new DataView(out.buffer).setBigUint64(0, BigInt(jsonBytes.byteLength), true);
  out.set(jsonBytes, 8);
  return out;
}

function isStreamed(t: readonly HostTensor[] | StreamedTensors): t is StreamedTensors {
  return !Array.isArray(t);
}

/** Writes a safetensors file, streaming tensor bytes to disk; returns the file's size in bytes. */
export async function writeSafetensors(path: string, tensors: readonly HostTensor[] | StreamedTensors): Promise<number> {
  const streamed: StreamedTensors = isStreamed(tensors)
    ? tensors
    : { specs: tensors, chunks: (_spec, i) => [tensors[i]!.data] };
  const header = safetensorsHeader(streamed.specs);
  const handle = await open(path, 'w');
  try {
    let position = 0;
    const write = async (bytes: Uint8Array): Promise<void> => {
      let numWritten = 0;
      while (numWritten < bytes.byteLength) {
        const { bytesWritten } = await handle.write(bytes, numWritten, bytes.byteLength - numWritten, position + numWritten);
        numWritten += bytesWritten;
      }
      position += bytes.byteLength;
    };
    await write(header);
    for (let i = 0; i < streamed.specs.length; i++) {
      const spec = streamed.specs[i]!;
      const expectedBytes = tensorBytes(spec);
      let numBytes = 0;
      for await (const chunk of streamed.chunks(spec, i)) {
        numBytes += chunk.byteLength;
        if (numBytes > expectedBytes) break;
        await write(chunk);
      }
      if (numBytes !== expectedBytes) {
        throw new Error(`${path}: tensor "${spec.name}" produced ${numBytes} bytes, its shape and dtype need ${expectedBytes}`);
      }
    }
    return position;
  } finally {
    await handle.close();
  }
}

/**
 * A small safetensors file of tensors of any safetensors dtype, given as bytes (an EAGLE-3 head's I64 d2t and BOOL
 * t2d beside its float weights), written at once.
 */
export function writeRawSafetensors(path: string, tensors: readonly { name: string; dtype: string; shape: readonly number[];
  data: Uint8Array }[]): void {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const jsonBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + jsonBytes.byteLength + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(jsonBytes.byteLength), true);
  out.set(jsonBytes, 8);
  let at = 8 + jsonBytes.byteLength;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  writeFileSync(path, out);
}
