// The device and pinned buffers a step's metadata lives in (step-meta.ts packs it): sized for a layout's
// capacities, grown (never shrunk) when a step outgrows them. Captured graphs name these buffers, so every
// replacement bumps `generation` and the graphs captured before it are not replayed (cuda-backend.ts graph()).

import { TOKEN_READS_IN_FLIGHT } from '../backend.js';
import type { Device, PinnedBuffer } from './device.js';
import type { MetaLayout } from './step-meta.js';

/** Most decode attention rows (query-head groups) per token: numHeads / G. */
export const MAX_DECODE_ROWS_PER_TOKEN = 128;

export interface Meta {
  layout: MetaLayout;
  host: PinnedBuffer;
  words: Int32Array;
  device: bigint;
  /** Decode attention's per-row split counters, [capTokens, MAX_DECODE_ROWS_PER_TOKEN] int32, zero between launches. */
  rowCounters: bigint;
  /** [capTokens] int32: the last step's sampled tokens, which the next step's negative input ids name. */
  sampledIds: bigint;
  /** Two pinned [capTokens] int32 slots the sampled tokens of graph launches come back in, by turns. */
  tokenSlots: PinnedBuffer;
  /**
   * Decode attention's split states, [row-splits, numHeads, D + 2] f32 (outputs, then max and sum; a launch lays
   * them out [rows, numHeads, its cap, ...] within: decode-splits.ts splitStateRows), made
   * at the first step with decode rows and shared by every layer: their size follows the capacities, not the
   * step, so a step with few decode rows (whose rows share blocks) needs no activation memory the profile run's
   * largest step did not.
   */
  partials: { ptr: bigint; bytes: number } | null;
}

/** Device address of word `wordOffset` of the packed step. */
export function metaPtr(meta: Meta, wordOffset: number): bigint {
  return meta.device + BigInt(wordOffset * 4);
}

export class StepBuffers {
  meta: Meta | null = null;
  /** Bumped whenever a buffer a captured graph may name is replaced. */
  generation = 0;
  private readonly retiredTokenSlots: PinnedBuffer[] = [];

  constructor(private readonly device: Device) {}

  /** Buffers for `layout`; the last step's sampled tokens move along (the next step's negative input ids read them). */
  grow(layout: MetaLayout, capturing: boolean): void {
    if (capturing) throw new Error('step metadata outgrown during graph capture');
    const d = this.device;
    d.synchronize();
    const sampledIds = d.alloc(layout.capTokens * 4);
    if (this.meta) {
      d.copyDeviceAsync(sampledIds, this.meta.sampledIds, this.meta.layout.capTokens * 4);
      d.synchronize();
      this.free(this.meta, false);
    }
    const host = d.hostAlloc(layout.totalWords * 4);
    const counterBytes = layout.capTokens * MAX_DECODE_ROWS_PER_TOKEN * 4;
    const rowCounters = d.alloc(counterBytes);
    d.fillBytesAsync(rowCounters, 0, counterBytes);
    d.synchronize();
    this.meta = { layout, host, words: new Int32Array(host.view, 0, layout.totalWords),
      device: d.alloc(layout.totalWords * 4), rowCounters, sampledIds, partials: null,
      tokenSlots: d.hostAlloc(TOKEN_READS_IN_FLIGHT * layout.capTokens * 4) };
    this.generation++;
  }

  /**
   * The decode attention's split-state buffers of `meta` (see Meta.partials) for `rowSplits` row-splits (decode rows
   * x their launch's cap: decode-splits.ts splitStateRows), made or grown outside a capture.
   */
  partials(meta: Meta, numHeads: number, D: number, rowSplits: number,
    capturing: boolean): { out: bigint; ml: bigint } {
    const outBytes = rowSplits * numHeads * D * 4;
    const bytes = outBytes + rowSplits * numHeads * 2 * 4;
    if (!meta.partials || meta.partials.bytes < bytes) {
      if (capturing) throw new Error('decode attention partials outgrown during graph capture');
      if (meta.partials) {
        this.device.synchronize();
        this.device.free(meta.partials.ptr);
        this.generation++;  // captured graphs named the old buffer
      }
      meta.partials = { ptr: this.device.alloc(bytes), bytes };
    }
    return { out: meta.partials.ptr, ml: meta.partials.ptr + BigInt(outBytes) };
  }

  dispose(): void {
    if (this.meta) this.free(this.meta, true);
    this.meta = null;
    for (const slots of this.retiredTokenSlots.splice(0)) this.device.hostFree(slots);
  }

  private free(meta: Meta, disposing: boolean): void {
    this.device.hostFree(meta.host);
    this.device.free(meta.device);
    this.device.free(meta.rowCounters);
    this.device.free(meta.sampledIds);
    if (meta.partials) this.device.free(meta.partials.ptr);
    // a launched step's wait may still read its slot: outgrown slots live until dispose
    if (disposing) this.device.hostFree(meta.tokenSlots);
    else this.retiredTokenSlots.push(meta.tokenSlots);
  }
}
