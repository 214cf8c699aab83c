// Rows in and out of the device: the embedding lookup, the gather of the logits rows, token sampling
// (kernels/sample.cu; only the token ids reach the host), prompt logprobs, and reads to the host. During a graph
// capture a read is recorded (capturedRead) for the replay to copy out, never waited for.

import { BYTES_PER_ELEMENT } from '../../loader/dtype.js';
import { TOKEN_READS_IN_FLIGHT, type StepInputs, type Tensor, type TensorParallelRank } from '../backend.js';
import { i32, ptr } from './device.js';
import { check, type Handle } from './ffi/driver.js';
import type { HostRead } from './graph-cache.js';
import { bf16BytesToF32 } from './host-staging.js';
import { SAMPLE_THREADS } from './kernel-defines.js';
import { metaPtr } from './step-buffers.js';
import type { StepContext } from './step-context.js';
import { asCuda, CudaTensor } from './tensor.js';

export class CudaSampling {
  /** Device buffer of rowLogprobs' target ids (grown as needed). */
  private targets = 0n;
  private targetsBytes = 0;
  /** Recorded after each token copy, by turns (slot i of meta.tokenSlots, TOKEN_READS_IN_FLIGHT of them). */
  private readonly tokensCopied: Handle[];
  private tokenSlot = 0;
  /** What the step being captured reads back (the graph's replay copies it out). */
  capturedRead: HostRead = null;

  constructor(private readonly s: StepContext) {
    this.tokensCopied = Array.from({ length: TOKEN_READS_IN_FLIGHT }, () => s.event());
  }

  /**
   * out[t] = table[inputIds[t]]; a negative id -(r + 1) is the last sampleTokens' row r. `firstRow`: the table is
   * a tensor-parallel rank's part of the vocabulary from that row, and other ids give zeros (Backend.embedding).
   */
  embedding(table: Tensor, step: StepInputs, firstRow?: number): CudaTensor {
    const { batch, meta, layout } = this.s.of(step);
    const w = asCuda(table);
    const [rows, hidden] = [w.shape[0]!, w.shape[1]!];
    const out = this.s.act([batch.numTokens, hidden]);
    const args = [ptr(w.ptr), ptr(metaPtr(meta, layout.inputIds)), ptr(meta.sampledIds), ptr(out.ptr), i32(hidden)];
    this.s.timed('embedding', () => this.s.device.launch('embedding.cu', firstRow === undefined ? 'embedding_bf16' : 'embedding_part_bf16',
      [batch.numTokens, 1, 1], 256, firstRow === undefined ? args : [...args, i32(firstRow), i32(rows)], 0, true));
    return out;
  }

  gatherLogitRows(x: Tensor, step: StepInputs): CudaTensor {
    const { batch, meta, layout } = this.s.of(step);
    const xs = asCuda(x);
    const hidden = xs.shape[1]!;
    const numRows = batch.logitsIndices.length;
    const out = this.s.act([numRows, hidden]);
    this.s.timed('sampling', () => this.s.device.launch('embedding.cu', 'gather_rows_bf16', [numRows, 1, 1], 256,
      [ptr(xs.ptr), ptr(metaPtr(meta, layout.logitsIndices)), ptr(out.ptr), i32(hidden)], 0, true));
    return out;
  }

  /** Backend.gatherColumnParts: the all-gather (NCCL, in a graph where captured), then one join of the parts. */
  gatherColumnParts(x: Tensor, tp: TensorParallelRank, width: number): CudaTensor {
    const xs = asCuda(x);
    const [R, W] = [xs.shape[0]!, xs.shape[1]!];
    const parts = this.s.act([tp.size * R, W]);
    const out = this.s.act([R, width]);
    tp.allGather(xs, parts);
    if (R > 0) {
      this.s.timed('sampling', () => this.s.device.launch('embedding.cu', 'join_column_parts_bf16', [R, 1, 1], 256,
        [ptr(parts.ptr), ptr(out.ptr), i32(R), i32(W), i32(width)], 0, true));
    }
    return out;
  }

  /**
   * Backend.concatColumns: each part copied whole into a [P, T, W] staging activation (contiguous copies: memcpy
   * nodes in a graph), then the one join the tensor-parallel logits use, which reads exactly that layout.
   */
  concatColumns(parts: readonly Tensor[]): CudaTensor {
    const xs = parts.map(asCuda);
    const [T, W] = [xs[0]?.shape[0] ?? 0, xs[0]?.shape[1] ?? 0];
    if (xs.length === 0 || xs.some((x) => x.dtype !== 'bf16' || x.shape.length !== 2 || x.shape[0] !== T || x.shape[1] !== W)) {
      throw new Error(`concatColumns: parts ${xs.map((x) => `${x.dtype} [${x.shape.join(', ')}]`).join(', ')} are not bf16 [T, W] alike`);
    }
    const staging = this.s.act([xs.length * T, W]);
    const out = this.s.act([T, xs.length * W]);
    if (T === 0) return out;
    const bytes = T * W * 2;
    this.s.timed('copies', () => xs.forEach((x, p) => this.s.device.copyDeviceAsync(staging.ptr + BigInt(p * bytes), x.ptr, bytes)));
    this.s.timed('copies', () => this.s.device.launch('embedding.cu', 'join_column_parts_bf16', [T, 1, 1], 256,
      [ptr(staging.ptr), ptr(out.ptr), i32(T), i32(W), i32(xs.length * W)], 0, true));
    return out;
  }

  /** Tokens per logits row on the GPU (kernels/sample.cu); only R int32 reach the host. */
  sampleTokens(logits: Tensor, step: StepInputs): Int32Array {
    const { R, ids } = this.launchSampling(logits, step);
    if (this.s.capturing) {
      // copied to the host by the graph's launch after the graph, into one of two slots, so a step launched before
      // this one's tokens are read cannot overwrite them
      this.capturedRead = { numElements: R, dtype: 'i32', src: ids };
      return new Int32Array(R);
    }
    const view = this.s.readToHost(ids, R * 4);
    return new Int32Array(view.slice(0, R * 4));
  }

  /**
   * sampleTokens without waiting for the step: its tokens go to one of the two pinned slots graph steps use, with
   * that slot's event, so the host schedules and launches the next step while this one runs. Call the returned
   * function before the step after next is launched.
   */
  sampleTokensAsync(logits: Tensor, step: StepInputs): () => Int32Array {
    if (this.s.capturing) throw new Error('CudaBackend: sampleTokensAsync during graph capture');
    const { R, ids } = this.launchSampling(logits, step);
    return this.readTokensLater(ids, R);
  }

  private launchSampling(logits: Tensor, step: StepInputs): { R: number; ids: bigint } {
    const { meta, layout } = this.s.of(step);
    const l = asCuda(logits);
    const [R, vocab] = [l.shape[0]!, l.shape[1]!];
    const ids = meta.sampledIds;  // where the next step's negative input ids read them
    if (R > 0) {
      this.s.timed('sampling', () => this.s.device.launch('sample.cu', `sample_tokens_${l.dtype}`, [R, 1, 1], SAMPLE_THREADS,
        [ptr(l.ptr), i32(vocab), ptr(metaPtr(meta, layout.sampling)), i32(layout.capTokens), ptr(ids)], 0, true));
    }
    return { R, ids };
  }

  /** Copies `n` token ids from `src` into the next of the pinned slots and returns what waits for them. */
  readTokensLater(src: bigint, n: number, done?: () => void): () => Int32Array {
    const meta = this.s.steps.meta!;
    const slot = this.tokenSlot;
    this.tokenSlot = (slot + 1) % TOKEN_READS_IN_FLIGHT;
    const bytes = n * 4;
    const at = slot * meta.layout.capTokens * 4;
    const api = this.s.device.api;
    check(api.cuMemcpyDtoHAsync_v2(meta.tokenSlots.ptr + BigInt(at), src, bytes, this.s.device.stream), 'cuMemcpyDtoHAsync_v2');
    check(api.cuEventRecord(this.tokensCopied[slot]!, this.s.device.stream), 'cuEventRecord');
    const slots = meta.tokenSlots;  // outgrown slots live until dispose (StepBuffers)
    return () => {
      check(api.cuEventSynchronize(this.tokensCopied[slot]!), 'cuEventSynchronize');
      if (done) done();
      else this.s.profiler?.finishStep();
      return new Int32Array(slots.view.slice(at, at + bytes));
    };
  }

  toHost(t: Tensor): Float32Array {
    const c = asCuda(t);
    if (c.dtype === 'f8_e4m3') throw new Error('toHost: an f8_e4m3 tensor');
    const view = this.s.readToHost(c.ptr, c.numBytes);
    if (this.s.capturing) {
      this.capturedRead = { numElements: c.numElements, dtype: c.dtype };
      return new Float32Array(c.numElements);
    }
    return c.dtype === 'bf16' ? bf16BytesToF32(view, c.numElements) : new Float32Array(view.slice(0, c.numBytes));
  }

  toHostRows(t: Tensor, first: number, count: number): Float32Array {
    const c = asCuda(t);
    const n = c.shape[1]!;
    const bytes = BYTES_PER_ELEMENT[c.dtype];
    return this.toHost(new CudaTensor([count, n], c.ptr + BigInt(first * n * bytes), c.dtype));
  }

  /** Prompt logprobs by kernels/sample.cu's row_logprobs: only 2 + 2 numTop int32 a row reach the host. */
  rowLogprobs(logits: Tensor, first: number, targets: Int32Array, numTop: number): Int32Array {
    const l = asCuda(logits);
    const n = targets.length;
    const width = 2 + 2 * numTop;
    const d = this.s.device;
    if (this.targetsBytes < n * 4) {
      if (this.targets !== 0n) d.free(this.targets);
      this.targetsBytes = Math.max(n * 4, 4096);
      this.targets = d.alloc(this.targetsBytes);
    }
    d.upload(this.targets, targets);
    const out = this.s.act([n * width], 'f32');
    this.s.timed('sampling', () => d.launch('sample.cu', `row_logprobs_${l.dtype}`, [n, 1, 1], 256,
      [ptr(l.ptr), i32(l.shape[1]!), i32(first), ptr(this.targets), i32(numTop), ptr(out.ptr)], 0, true));
    return new Int32Array(this.s.readToHost(out.ptr, n * width * 4).slice(0, n * width * 4));
  }

  dispose(): void {
    if (this.targets !== 0n) this.s.device.free(this.targets);
    this.targets = 0n;
    for (const e of this.tokensCopied) this.s.device.api.cuEventDestroy_v2(e);
  }
}
