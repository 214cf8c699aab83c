// Weights on the device: uploads (converted to bf16), row-concatenations streamed from the checkpoint without a
// host copy of the whole, block-FP8 weights kept as stored, --quantization fp8's on-device quantization, and GGUF
// projections kept as llama.cpp's blocks (gguf-layout.ts).

import { bytesToF32, BYTES_PER_ELEMENT, f32ToBf16 } from '../../loader/dtype.js';
import { GGML_TYPES } from '../../loader/gguf-quants.js';
import type { ByteSegment, GgufBlocks, GgufBlockType, HostTensor, WeightSource } from '../../loader/types.js';
import type { Fp8BlockPart } from '../backend.js';
import { FP8_BLOCK } from '../fp8-linear.js';
import { Device, i32, ptr } from './device.js';
import { fp8DeviceScales, fp8ScaleRowFloats } from './fp8-layout.js';
import { GGUF_DEVICE_FORMATS, GgufWeight, type GgufSegment } from './gguf-layout.js';
import { CudaTensor } from './tensor.js';
import { WeightUploader } from './weight-upload.js';

export class CudaWeights {
  private readonly pointers: bigint[] = [];
  /** Bytes of everything uploaded. */
  numBytes = 0;
  private uploader: WeightUploader | null = null;

  constructor(private readonly device: Device, private readonly o: { batchInvariant: boolean; uploadChunkBytes?: number }) {}

  /** Keeps `p` (allocated for a weight or a table) until dispose, counting `bytes`. */
  track(p: bigint, bytes = 0): void {
    this.pointers.push(p);
    this.numBytes += bytes;
  }

  /** The pinned chunks of streamed uploads are freed once loading ends (the first step, or the KV cache's allocation). */
  dropUploader(): void {
    this.uploader?.dispose();
    this.uploader = null;
  }

  private streamer(): WeightUploader {
    this.uploader ??= new WeightUploader(this.device, this.o.uploadChunkBytes);
    return this.uploader;
  }

  upload(t: HostTensor): CudaTensor {
    const numElements = t.shape.reduce((a, b) => a * b, 1);
    if (t.data.byteLength !== numElements * BYTES_PER_ELEMENT[t.dtype]) {
      throw new Error(`upload ${t.name}: ${t.data.byteLength} bytes for ${t.dtype}[${t.shape.join(', ')}]`);
    }
    const bits: ArrayBufferView = t.dtype === 'bf16' ? t.data : f32ToBf16(bytesToF32(t.dtype, t.data));
    const p = this.device.alloc(bits.byteLength);
    this.device.upload(p, bits);
    this.track(p, bits.byteLength);
    return new CudaTensor([...t.shape], p);
  }

  /** The bf16 bytes `segments` of `source`, back to back, streamed to the device as one tensor of `shape`. */
  uploadSegments(name: string, source: WeightSource, segments: readonly ByteSegment[],
    shape: readonly number[]): CudaTensor {
    const numBytes = shape.reduce((a, b) => a * b, 1) * 2;
    if (segments.some((s) => source.info(s.name).dtype !== 'bf16')) {
      throw new Error(`uploadSegments ${name}: parts must be bf16`);
    }
    const p = this.device.alloc(numBytes);
    this.track(p);
    const written = this.streamer().upload(p, source, segments);
    if (written !== numBytes) throw new Error(`uploadSegments ${name}: ${written} bytes for ${numBytes}`);
    this.numBytes += numBytes;
    return new CudaTensor([...shape], p);
  }

  /**
   * A block-FP8 weight kept as it is stored: its e4m3 rows (parts concatenated) and their block scales, for
   * cuBLASLt's block-scaled FP8 GEMM (sm_90; matmul quantizes the activations to match).
   */
  uploadFp8Block(name: string, parts: readonly Fp8BlockPart[]): CudaTensor {
    this.checkFp8(name);
    const { N, K, scales: scaleRows } = fp8DeviceScales(name, parts);
    const p = this.device.alloc(N * K);
    const scales = this.device.alloc(scaleRows.byteLength);
    this.track(p);
    this.track(scales);
    let row = 0;
    for (const { weight } of parts) {
      this.device.upload(p + BigInt(row * K), weight.data);
      row += weight.shape[0]!;
    }
    this.device.upload(scales, scaleRows);
    this.numBytes += N * K + scaleRows.byteLength;
    return new CudaTensor([N, K], p, 'f8_e4m3', scales);
  }

  private checkFp8(name: string): void {
    if (this.device.arch < 90) {
      throw new Error(`${name}: block-FP8 weights need compute capability 9.0 (Hopper) for cuBLASLt's block-scaled FP8 GEMM; ${this.device.name} is ${this.device.arch / 10}`);
    }
    if (this.o.batchInvariant) throw new Error(`${name}: --batch-invariant does not run block-FP8 weights (its GEMM is bf16)`);
  }

  /**
   * --quantization fp8: the parts' rows (bf16, or another float dtype rounded to bf16 first) uploaded to a scratch
   * buffer and quantized there by kernels/quant_fp8.cu's quantize_weight_blocks_bf16 (quantizeWeightBlocks' bytes).
   */
  quantizeFp8Block(name: string, source: WeightSource, names: readonly string[]): CudaTensor {
    this.checkFp8(name);
    const infos = names.map((n) => source.info(n));
    const K = infos[0]?.shape[1] ?? 0;
    if (infos.some((i) => i.shape.length !== 2 || i.shape[1] !== K || i.shape[0]! % FP8_BLOCK !== 0) || K % FP8_BLOCK !== 0) {
      throw new Error(`quantizeFp8Block ${name}: parts [${infos.map((i) => i.shape.join(' x ')).join(', ')}] are not ` +
        'of one width, with rows and columns multiples of 128');
    }
    const N = infos.reduce((n, i) => n + i.shape[0]!, 0);
    const scratch = this.device.alloc(N * K * 2);
    try {
      if (infos.every((i) => i.dtype === 'bf16') && source.readInto) {
        const whole = infos.map((i, j) => ({ name: names[j]!, offset: 0, bytes: i.shape[0]! * K * 2 }));
        if (this.streamer().upload(scratch, source, whole) !== N * K * 2) {
          throw new Error(`quantizeFp8Block ${name}: size mismatch`);
        }
      } else {
        let row = 0;
        for (const n of names) {
          const t = source.read(n);
          this.device.upload(scratch + BigInt(row * K * 2), t.dtype === 'bf16' ? t.data : f32ToBf16(bytesToF32(t.dtype, t.data)));
          row += t.shape[0]!;
        }
      }
      const rowFloats = fp8ScaleRowFloats(K);
      const p = this.device.alloc(N * K);
      const scales = this.device.alloc(N / FP8_BLOCK * rowFloats * 4);
      this.track(p);
      this.track(scales);
      this.device.fillBytesAsync(scales, 0, N / FP8_BLOCK * rowFloats * 4);
      this.device.launch('quant_fp8.cu', 'quantize_weight_blocks_bf16', [K / FP8_BLOCK, N / FP8_BLOCK, 1], 256,
        [ptr(scratch), ptr(p), ptr(scales), i32(K), i32(rowFloats)]);
      this.numBytes += N * K + N / FP8_BLOCK * rowFloats * 4;
      return new CudaTensor([N, K], p, 'f8_e4m3', scales);
    } finally {
      this.device.synchronize();  // the scratch is read by the kernel (and by the uploader's copies)
      this.device.free(scratch);
    }
  }

  /**
   * A GGUF projection as its blocks in the device layout (gguf-layout.ts), the parts' rows concatenated: a run of
   * parts of one block type is one segment (its bodies, then its scales, each contiguous), so a fused projection of
   * Q4_K q and k with a Q6_K v (a Q4_K_M file's) is two segments that matmul runs one after the other.
   */
  uploadGguf(name: string, parts: readonly GgufBlocks[]): GgufWeight {
    const K = parts[0]?.shape[1] ?? 0;
    const bad = parts.find((p) => p.shape[1] !== K || K % GGML_TYPES[p.type].blockElems !== 0);
    if (bad || parts.length === 0) {
      throw new Error(`uploadGguf ${name}: parts [${parts.map((p) => `${p.type} ${p.shape.join(' x ')}`).join(', ')}] ` +
        'are not of one width of whole blocks');
    }
    const segments: GgufSegment[] = [];
    let row = 0;
    let numBytes = 0;
    for (let i = 0; i < parts.length;) {
      const type = parts[i]!.type;
      const run: GgufBlocks[] = [];
      while (i < parts.length && parts[i]!.type === type) run.push(parts[i++]!);
      const rows = run.reduce((n, p) => n + p.shape[0], 0);
      const { body, scales, bytes } = this.uploadBlocks(type, run.map((p) => p.data));
      numBytes += bytes;
      segments.push({ type, row0: row, rows, body, scales });
      row += rows;
    }
    this.numBytes += numBytes;
    return new GgufWeight([row, K], segments, numBytes);
  }

  /**
   * Stored blocks of one type, the parts one after the other, in the device layout (gguf-layout.ts): uploaded as they
   * are where the body is the block, else through a scratch that kernels/gguf.cu's gguf_split_blocks reorders into
   * bodies and scales on the device (ggufDeviceLayout is its host model, in the tests).
   */
  private uploadBlocks(type: GgufBlockType, parts: readonly Uint8Array[]): { body: bigint; scales: bigint; bytes: number } {
    const f = GGUF_DEVICE_FORMATS[type];
    const { blockBytes } = GGML_TYPES[type];
    const stored = parts.reduce((n, a) => n + a.byteLength, 0);
    if (f.dOffset === null) return { body: this.uploadJoined(parts), scales: 0n, bytes: stored };
    const numBlocks = stored / blockBytes;
    const body = this.device.alloc(numBlocks * f.bodyBytes);
    this.track(body);
    const scales = this.device.alloc(numBlocks * 2);
    this.track(scales);
    const scratch = this.device.alloc(Math.max(...parts.map((a) => a.byteLength)));
    try {
      let b0 = 0;
      for (const a of parts) {
        const n = a.byteLength / blockBytes;
        this.device.synchronize();  // the scratch's last split has run
        this.device.upload(scratch, a);
        this.device.launch('gguf.cu', 'gguf_split_blocks', [Math.min(Math.ceil((n * f.bodyBytes) / 256), 65535 * 4), 1, 1], 256,
          [ptr(scratch), ptr(body + BigInt(b0 * f.bodyBytes)), ptr(scales + BigInt(b0 * 2)), i32(n), i32(blockBytes), i32(f.dOffset)]);
        b0 += n;
      }
    } finally {
      this.device.synchronize();
      this.device.free(scratch);
    }
    return { body, scales, bytes: numBlocks * (f.bodyBytes + 2) };
  }

  /** The arrays one after the other in one allocation (kept until dispose). */
  private uploadJoined(arrays: readonly Uint8Array[]): bigint {
    const p = this.device.alloc(arrays.reduce((n, a) => n + a.byteLength, 0));
    this.track(p);
    let offset = 0;
    for (const a of arrays) {
      this.device.upload(p + BigInt(offset), a);
      offset += a.byteLength;
    }
    return p;
  }

  dispose(): void {
    this.dropUploader();
    for (const p of this.pointers) this.device.free(p);
    this.pointers.length = 0;
  }
}
