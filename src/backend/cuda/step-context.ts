// What every part of the CUDA backend shares within a step: the device, the step's metadata (packed on the host,
// copied to the device once), the activation workspace, the staging buffer for reads, the profiler, and whether a
// graph is being captured. beginStep() resets the workspace, so the same op calls on the same shapes get the same
// buffers (what lets a decode step be captured once and replayed).

import { BYTES_PER_ELEMENT } from '../../loader/dtype.js';
import type { ForwardBatch } from '../batch.js';
import type { StepInputs } from '../backend.js';
import { Device } from './device.js';
import { check, CU_EVENT_DISABLE_TIMING, CU_EVENT_RECORD_EXTERNAL, outPtr, type Handle } from './ffi/driver.js';
import { HostStaging } from './host-staging.js';
import { Profiler, type ProfileLogMode } from './profiler.js';
import { type Meta, StepBuffers } from './step-buffers.js';
import { layoutAtLeast, layoutFor, type MetaLayout, packStep, type PackedStep, stepLayout } from './step-meta.js';
import { CudaTensor } from './tensor.js';
import { StepWorkspace } from './workspace.js';

/** The step being built: its batch, packed metadata and where its sections are. */
export interface CurrentStep {
  batch: ForwardBatch;
  packed: PackedStep;
  /** Where the step's metadata sections are (step-meta.ts stepLayout): what its kernels are given. */
  layout: MetaLayout;
  ropeTable?: { invFreq: bigint; ptr: bigint };
  /** The most splits a row of the step's decode kernel needs (every layer asks; a mixed step has 16k tokens). */
  decodeMaxSplits?: number;
}

/** A profile's name for an eager step: its kind and token count (rounded up to a power of two). */
function eagerShape(batch: ForwardBatch): string {
  let numTokens = 1;
  while (numTokens < batch.numTokens) numTokens *= 2;
  return `${isDecodeOnly(batch) ? 'decode' : 'prefill/mixed'} <=${numTokens} tokens`;
}

/**
 * Whether every row of the batch has the same number of tokens: the steps a graph may replay (decode steps, one
 * token a row; speculative decoding's verify steps, k + 1 a row), whose launches are a function of the row count.
 */
export function hasUniformRows(batch: ForwardBatch): boolean {
  const q = batch.queryStartLoc[1]! - batch.queryStartLoc[0]!;
  for (let s = 1; s < batch.numSeqs; s++) {
    if (batch.queryStartLoc[s + 1]! - batch.queryStartLoc[s]! !== q) return false;
  }
  return q >= 1;
}

export function isDecodeOnly(batch: ForwardBatch): boolean {
  for (let s = 0; s < batch.numSeqs; s++) {
    if (batch.queryStartLoc[s + 1]! - batch.queryStartLoc[s]! !== 1) return false;
  }
  return true;
}

export class StepContext {
  readonly workspace: StepWorkspace;
  readonly steps: StepBuffers;
  readonly staging: HostStaging;
  readonly profiler: Profiler | null;
  /** Recorded once the step's metadata reached the device (the host may then pack the next step). */
  readonly metaCopied: Handle;
  metaCopyPending = false;
  current: CurrentStep | null = null;
  /** A graph is being captured: nothing may allocate, grow, wait or read back. */
  capturing = false;

  constructor(readonly device: Device, readonly log: (text: string) => void,
    opts: { initialWorkspaceBytes: number; profile: boolean; profileLog?: ProfileLogMode }) {
    this.workspace = new StepWorkspace(device, opts.initialWorkspaceBytes);
    this.staging = new HostStaging(device);
    this.profiler = opts.profile ? new Profiler(device.api, device.stream, log, opts.profileLog) : null;
    this.steps = new StepBuffers(device);
    this.metaCopied = this.event();
  }

  event(): Handle {
    const ev: [Handle | null] = [null];
    check(this.device.api.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING), 'cuEventCreate');
    return outPtr(ev, 'cuEventCreate');
  }

  /** Resets the workspace and stages the step's metadata (Backend.beginStep). */
  begin(batch: ForwardBatch): StepInputs {
    if (!this.capturing) {
      if (this.metaCopyPending) check(this.device.api.cuEventSynchronize(this.metaCopied), 'cuEventSynchronize');
      this.profiler?.finishStep();
      this.profiler?.startStep(eagerShape(batch));
      if (this.workspace.needsMerge) this.device.synchronize();
    }
    this.workspace.reset();
    const layout = layoutFor(batch, this.steps.meta?.layout ?? null);
    if (layout !== this.steps.meta?.layout) this.steps.grow(layout, this.capturing);
    const meta = this.steps.meta!;
    const stepMeta = stepLayout(batch, meta.layout);
    const packed = packStep(batch, stepMeta, meta.words);
    this.timed('copies', () => this.device.copyToDeviceAsync(meta.device, meta.host, stepMeta.totalWords * 4));
    if (!this.capturing) {
      check(this.device.api.cuEventRecord(this.metaCopied, this.device.stream), 'cuEventRecord');
      this.metaCopyPending = true;
    } else {
      // a node of the graph: each replay records it once its copy is done, so the host may pack the next step
      // while the rest of this one runs (graphLaunch)
      check(this.device.api.cuEventRecordWithFlags(this.metaCopied, this.device.stream, CU_EVENT_RECORD_EXTERNAL),
        'cuEventRecordWithFlags');
    }
    this.current = { batch, packed, layout: stepMeta };
    return { batch };
  }

  /** Sizes the step metadata for the largest step the engine will run (growing it invalidates every graph). */
  reserveCapacity(numTokens: number, numSeqs: number, maxBlocksPerSeq: number): void {
    const layout = layoutAtLeast(this.steps.meta?.layout ?? null, numTokens, numSeqs, maxBlocksPerSeq);
    if (layout !== this.steps.meta?.layout) this.steps.grow(layout, this.capturing);
  }

  /** The current step, checked to be the one `step` names. */
  of(step: StepInputs): CurrentStep & { meta: Meta } {
    const meta = this.steps.meta;
    if (!this.current || this.current.batch !== step.batch || !meta) {
      throw new Error('CudaBackend: op called with a step other than the current one (beginStep first)');
    }
    return { ...this.current, meta };
  }

  /** An activation from the step's workspace. */
  act(shape: number[], dtype: 'bf16' | 'f32' | 'f8_e4m3' = 'bf16'): CudaTensor {
    const bytes = shape.reduce((a, b) => a * b, 1) * BYTES_PER_ELEMENT[dtype];
    return new CudaTensor(shape, this.workspace.alloc(bytes), dtype);
  }

  timed<T>(bucket: string, fn: () => T): T {
    return this.profiler ? this.profiler.time(bucket, fn) : fn();
  }

  /** `bytes` from the device into the staging buffer; waits unless capturing (then the graph's replay reads it). */
  readToHost(src: bigint, bytes: number): ArrayBuffer {
    const staging = this.staging.ensure(bytes, this.capturing);
    this.timed('copies', () => this.device.copyToHostAsync(staging, src, bytes));
    if (this.capturing) return staging.view;
    this.device.synchronize();
    this.profiler?.finishStep();
    return staging.view;
  }

  /** Buffer generations a captured graph depends on (it names them by address). */
  generation(): string {
    return `${this.workspace.generation}:${this.steps.generation}:${this.staging.generation}`;
  }

  dispose(): void {
    this.profiler?.dispose();
    this.steps.dispose();
    this.workspace.dispose();
    this.staging.dispose();
    this.device.api.cuEventDestroy_v2(this.metaCopied);
  }
}
