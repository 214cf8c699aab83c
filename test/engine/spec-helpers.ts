// What the speculative-decoding engine tests (spec-decode, spec-draft, spec-mtp) run: prompts through the LLM class on
// the CPU backend, greedy unless told, with the transcripts (as comma-joined ids), texts, finish reasons, logprobs and
// stats; and checkpoints edited in place (an MTP head made to agree with its target).

import { renameSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../../src/backend/backend.js';
import { buildForwardBatch } from '../../src/engine/batch-builder.js';
import { LLM } from '../../src/engine/llm.js';
import { MtpProposer, type MtpRow } from '../../src/engine/spec/mtp-proposer.js';
import { loadModelDir, openWeights } from '../../src/loader/model-dir.js';
import { writeSafetensors } from '../../src/loader/safetensors-write.js';
import { Model } from '../../src/model/model.js';
import type { EngineOptions } from '../../src/engine/options.js';
import type { EngineStats } from '../../src/engine/types.js';

export interface Run { tokenIds: string[]; texts: string[]; finish: string[]; stats: EngineStats; logprobs: unknown[] }

export async function generate(model: string, opts: Partial<EngineOptions>, prompts: (string | number[])[],
  params: Record<string, unknown>): Promise<Run> {
  const llm = new LLM(model, { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const out = await llm.generate(prompts, { temperature: 0, ...params });
    return { tokenIds: out.map((c) => c.tokenIds.join(',')), texts: out.map((c) => c.text), finish: out.map((c) => c.finishReason),
      stats: await llm.stats(), logprobs: out.map((c) => c.logprobs) };
  } finally {
    await llm.close();
  }
}

/**
 * Rewrites an f32 checkpoint's model.safetensors in place: `edit` may change each tensor's values (a view of its f32
 * elements) and returns false to drop the tensor.
 */
export async function editCheckpoint(dir: string, edit: (name: string, values: Float32Array, shape: readonly number[],
  read: (name: string) => Float32Array) => boolean | void): Promise<void> {
  const source = openWeights(dir);
  const tensors = source.names().map((n) => source.read(n));
  const values = new Map(tensors.map((t) => [t.name, new Float32Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 4)]));
  if (tensors.some((t) => t.dtype !== 'f32')) throw new Error('editCheckpoint: f32 checkpoints only');
  const kept = tensors.filter((t) => edit(t.name, values.get(t.name)!, t.shape, (n) => values.get(n)!) !== false);
  const tmp = join(dir, 'edited.safetensors.tmp');
  await writeSafetensors(tmp, { specs: kept.map((t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape] })), chunks: (_, i) => [kept[i]!.data] });
  renameSync(tmp, join(dir, 'model.safetensors'));
}

/**
 * An editCheckpoint edit of a hybrid checkpoint with an MTP head: the target's mixers' and MLPs' outputs scaled by
 * `scale` (0: only the last token decides its prediction, through the final norm and the lm_head); the head's fc
 * passes the normed embedding through (its embedding half the identity), its final norm is the target's, and the rest
 * of it (fc's hidden half, its attention's and MLP's outputs) is scaled by `headScale`. With both 0 the head computes
 * the target's prediction from its input token, x_{t+2} from x_{t+1}, and agrees with the target on every proposal
 * (up to rounding); with small scales on some, while reading the hidden states and its own K and V.
 */
export function agreeingHead(scale: number, headScale = 0): Parameters<typeof editCheckpoint>[1] {
  return (name, v, shape, read) => {
    if (/(o_proj|out_proj|down_proj)\.weight$/.test(name)) v.forEach((x, i) => { v[i] = x * (name.startsWith('mtp.') ? headScale : scale); });
    if (name === 'mtp.pre_fc_norm_embedding.weight') v.fill(0);
    if (name === 'mtp.norm.weight') v.set(read('model.norm.weight'));
    if (name === 'mtp.fc.weight') {
      const H = shape[0]!;
      for (let i = 0; i < H; i++) {
        for (let j = 0; j < 2 * H; j++) v[i * 2 * H + j] = j < H ? Number(i === j) : v[i * 2 * H + j]! * headScale;
      }
    }
  };
}

/** Records the proposals every MTP fill makes (with the request's known tokens) until stop(). */
export function recordMtpProposals(): { take(): { known: number[]; proposals: number[] }[]; stop(): void } {
  const fill = MtpProposer.prototype.fill;
  let made: { known: number[]; proposals: number[] }[] = [];
  MtpProposer.prototype.fill = function (this: MtpProposer, rows: readonly MtpRow[]) {
    fill.call(this, rows);
    for (const { req, row } of rows) {
      if (row.sample && row.specTokenIds.length > 0) {
        made.push({ known: req.allTokenIds.slice(0, req.allTokenIds.length - req.numPlaceholders), proposals: [...row.specTokenIds] });
      }
    }
  };
  return {
    take: () => {
      const out = made;
      made = [];
      return out;
    },
    stop: () => {
      MtpProposer.prototype.fill = fill;
    },
  };
}

/**
 * The MTP head's proposals after `known` tokens, from scratch on `backend` (a fresh model of `dir` with its head): the
 * target over them, the head's catch-up over positions 0 .. n - 2, then proposal j + 1 from the engine's proposal j.
 */
export function mtpReference(dir: string, backend: Backend): (known: number[], proposals: number[]) => number[] {
  const m = loadModelDir(dir);
  const model = Model.load(m.config, m.weights, backend, { mtp: true });
  model.allocateMtpCarry(256);
  backend.allocateKvCache(model.kvCacheSpec(16, 16));
  backend.allocateRecurrentState(model.recurrentStateLayout(1)!);
  const blockTable = Array.from({ length: 15 }, (_, i) => i + 1);
  return (known, proposals) => {
    const n = known.length;
    model.forwardTokens(buildForwardBatch([{ tokenIds: known, startPosition: 0, blockTable, sample: true, stateSlot: 0 }], 16));
    const catchUp = buildForwardBatch([{ tokenIds: known.slice(1), startPosition: 0, blockTable, sample: true }], 16);
    const out = [model.mtpTokens({ ...catchUp, carryRows: Int32Array.from({ length: n - 1 }, (_, t) => t) })[0]!];
    for (let j = 1; j < proposals.length; j++) {
      const step = buildForwardBatch([{ tokenIds: [proposals[j - 1]!], startPosition: n - 2 + j, blockTable, sample: true }], 16);
      out.push(model.mtpTokens({ ...step, carryRows: Int32Array.from([j === 1 ? n - 2 : 0]) })[0]!);
    }
    return out;
  };
}
