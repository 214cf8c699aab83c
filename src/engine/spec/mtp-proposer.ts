// Proposals from the target's own multi-token-prediction head (vLLM's "mtp" method; model/mtp-head.ts computes it). The
// head at position t reads the target's final hidden state h_t and the token x_{t+1}, and predicts x_{t+2}; it runs
// on the target's backend, and its one attention layer keeps its K and V in the target's pages (one more KV layer:
// model.ts), so it needs no allocator, prefix cache or rollback of its own.
//
// How the hidden states flow: every target forward keeps its final hidden states, a row per token in the flat batch's
// order, on the device (Backend.carry; nothing reaches the host). This proposer remembers which rows of that step
// were whose (`pending`). At the next fill, after the step's tokens came back and the next step was scheduled, one
// catch-up forward of the head runs over every position t of those rows whose next token is now known: its input is
// the carried row and x_{t+1} from the request's tokens, so the head's K and V follow the target through prompt
// chunks, decode steps and verify steps (a verify step's positions up to the last accepted; the rest, computed on
// rejected proposals, are dropped and computed again after the target has). Before the target step that follows, or
// the carry would hold that step's instead; so no step is scheduled ahead of the last one's tokens while the head runs
// (SpecDecoding.needsTokensFirst).
//
// A row that wants k proposals samples the catch-up at its position n - 2 (n: its known tokens; x_{n-1} the target's
// last): proposal 1. Proposal j + 1 comes from one more forward at position n - 2 + j on the head's own output there
// (kept in the carry by the forward before) and proposal j, as vLLM applies the head recurrently. Those K and V rows
// are the head's guesses; the next catch-up writes each position again from the target's hidden state once the
// target has computed it. A proposal never decides a token: the target verifies each one.
//
// An EAGLE-3 head (vLLM's "eagle3" method, model/eagle3-head.ts) is driven the same way, through HeadForwards: its
// catch-up reads three of the target's layers' inputs from the carry (fc over them), its chained forwards its own
// prenorm output, and its draft ids map to target ids (d2t) before they are proposals.
//
// The chained forwards (one token a row) replay CUDA graphs of the target's backend, one per batch-size bucket
// (graph-buckets.ts headGraphKey), captured at start-up (captureGraphs): eager, each was a launch per kernel of the
// head from JavaScript and a wait (session 45: an EAGLE-3 step of the 208M demo target took 1.55 ms, the target's own
// 0.38). The carry rows travel in the step's metadata, which a replay stages anew. The catch-up (rows of as many
// tokens as the last step accepted) stays eager.

import type { DeviceGraphs } from '../../backend/backend.js';
import type { ForwardBatch } from '../../backend/batch.js';
import { buildForwardBatch, type ScheduledSeq } from '../batch-builder.js';
import { captureBucketGraphs, graphBucket, headGraphKey } from '../runner/graph-buckets.js';
import type { Model } from '../../model/model.js';
import type { ResolvedEngineOptions } from '../options.js';
import { readKnob } from '../../knobs/knobs.js';
import type { Request } from '../../scheduler/request.js';
import type { ScheduledRequest } from '../../scheduler/scheduler.js';

/**
 * The head's two kinds of forward (Model's): the catch-up over a target step's carried rows, and a chained proposal
 * over the head's own last output. An MTP head runs the same forward for both; an EAGLE-3 head reads the target's
 * three layers through its fc in the first and its own prenorm output in the second (model/eagle3-head.ts).
 */
export interface HeadForwards {
  /** The catch-up's greedy tokens, as target ids. */
  fromTarget(batch: ForwardBatch): Int32Array;
  /** A chained forward's greedy ids as its sampleTokens returns them (what its graph replays); toTarget maps them. */
  fromHead(batch: ForwardBatch): Int32Array;
  toTarget(ids: Int32Array): Int32Array;
}

export function mtpForwards(model: Model): HeadForwards {
  return { fromTarget: (batch) => model.mtpTokens(batch), fromHead: (batch) => model.mtpTokens(batch),
    toTarget: (ids) => ids };
}

export function eagle3Forwards(model: Model): HeadForwards {
  return { fromTarget: (batch) => model.eagle3Tokens(batch, 'target'),
    fromHead: (batch) => model.eagle3DraftIds(batch, 'head'), toTarget: (ids) => model.eagle3ToTargetIds(ids) };
}

/** The graphs the chained forwards replay (the target backend's; none: eager) and their buckets' bound. */
export interface HeadGraphs {
  graphs: DeviceGraphs | undefined;
  maxNumSeqs: number;
}

/**
 * The proposer of an MTP or EAGLE-3 head (null for other methods), over the head's forwards, its chained ones on the
 * model backend's graphs unless steps run eagerly (or QUIRE_SPEC_HEAD_GRAPHS is 0). `blockTableOf`: a request's
 * pages now (the KV cache manager's).
 */
export function headProposer(model: Model, options: Pick<ResolvedEngineOptions, 'speculativeConfig' | 'blockSize' |
  'enforceEager' | 'maxNumSeqs'>, blockTableOf: (requestId: string) => readonly number[]): MtpProposer | null {
  const method = options.speculativeConfig?.method;
  if (method !== 'mtp' && method !== 'eagle3') return null;
  const forwards = method === 'eagle3' ? eagle3Forwards(model) : mtpForwards(model);
  return new MtpProposer(model, options.blockSize, blockTableOf, forwards,
    { graphs: options.enforceEager || !readKnob('QUIRE_SPEC_HEAD_GRAPHS') ? undefined : model.backend.graphs,
      maxNumSeqs: options.maxNumSeqs });
}

/** A scheduled row and its request. */
export interface MtpRow {
  req: Request;
  row: ScheduledRequest;
}

/** A row of the target step that ran last: where its final hidden states sit in the carry. */
interface StepRow {
  req: Request;
  /** The request's preemptions when it ran: a request preempted since gave its pages back. */
  numPreemptions: number;
  start: number;
  numTokens: number;
  /** Its first token's row in the carry. */
  carryAt: number;
}

/** Tokens of the request known on the host (a step's sampling placeholder excluded). */
function numKnown(req: Request): number {
  return req.allTokenIds.length - req.numPlaceholders;
}

export class MtpProposer {
  /** The rows of the target step launched last (the carry holds their hidden states until the next target step). */
  private pending = new Map<Request, StepRow>();
  /** Forwards that failed (their rows fell back to proposals the target rejects unless it agrees). */
  numFailures = 0;

  /**
   * `blockTableOf`: the request's pages now (the KV cache manager's); `head`: the head's forwards (an MTP head's);
   * `headGraphs`: the graphs its chained forwards replay (none: eager).
   */
  constructor(readonly model: Model, private readonly blockSize: number,
    private readonly blockTableOf: (requestId: string) => readonly number[], private readonly head = mtpForwards(model),
    private readonly headGraphs: HeadGraphs = { graphs: undefined, maxNumSeqs: 0 }) {}

  /**
   * Captures the chained forwards' graph of every batch-size bucket, largest first, over padding rows (as the target's
   * decode graphs: ModelRunner.captureGraphs), so that no step of a run pays for a capture; a bucket's graph of long
   * rows (the other kv-length class) is captured the first time it runs.
   */
  captureGraphs(): void {
    const { graphs, maxNumSeqs } = this.headGraphs;
    if (!graphs) return;
    captureBucketGraphs(graphs, maxNumSeqs, this.blockSize, headGraphKey, (batch) => this.head.fromHead(batch),
      (batch) => (batch.carryRows = new Int32Array(batch.numSeqs)));
  }

  /**
   * Whether the next fill can propose for `req`: the step that ran last computed its hidden state at position n - 2,
   * and the request still holds what it computed.
   */
  canPropose(req: Request): boolean {
    const p = this.pending.get(req);
    const at = numKnown(req) - 2;
    return p !== undefined && this.holds(p) && at >= p.start && at < p.start + p.numTokens;
  }

  private holds(p: StepRow): boolean {
    return p.req.status === 'RUNNING' && p.req.numPreemptions === p.numPreemptions;
  }

  /**
   * After schedule(), before the step runs: the catch-up of the last step's rows, the proposals of `rows` that have
   * placeholders (filled in place), and `rows` remembered as the step about to run (its rows, in order, are the flat
   * batch's: the carry's).
   */
  fill(rows: readonly MtpRow[]): void {
    const wanting = rows.filter(({ row }) => row.sample && row.specTokenIds.length > 0);
    // a placeholder not filled keeps the request's last token (SpecDecoding.propose's), verified like any proposal
    try {
      const first = this.catchUp(new Set(wanting.map((w) => w.req)));
      if (wanting.some((w) => !first.has(w.req))) this.numFailures++;
      let active = wanting.filter((w) => first.has(w.req)).map((w) => ({ ...w, at: first.get(w.req)!.at }));
      active.forEach((w) => this.set(w.row, 0, first.get(w.req)!.token));
      for (let j = 1; (active = active.filter((w) => w.row.specTokenIds.length > j)).length > 0; j++) {
        const seqs: ScheduledSeq[] = active.map(({ req, row }) => ({ tokenIds: [row.specTokenIds[j - 1]!],
          startPosition: numKnown(req) - 2 + j, blockTable: row.blockTable, sample: true }));
        const tokens = this.forward(seqs, active.map((w) => w.at));
        active.forEach((w, i) => {
          this.set(w.row, j, tokens[i]!);
          w.at = i;
        });
      }
    } catch {
      this.numFailures++;
    }
    let carryAt = 0;
    this.pending = new Map(rows.map(({ req, row }) => {
      const p = { req, numPreemptions: req.numPreemptions, start: row.startPosition, numTokens: row.tokenIds.length, carryAt };
      carryAt += row.tokenIds.length;
      return [req, p];
    }));
  }

  /**
   * The head over every position of the last step's rows whose next token is known (and whose page the request still
   * holds); for the requests in `sampled`, its greedy token at their position n - 2 and that row's index in the carry.
   */
  private catchUp(sampled: ReadonlySet<Request>): Map<Request, { token: number; at: number }> {
    const seqs: ScheduledSeq[] = [];
    const carryRows: number[] = [];
    const order: Request[] = [];
    for (const p of this.pending.values()) {
      if (!this.holds(p)) continue;
      const { req, start } = p;
      const known = numKnown(req);
      const table = this.blockTableOf(req.requestId);
      // positions t with x_{t+1} known, in pages the request holds
      const end = Math.min(start + p.numTokens, known - 1, table.length * this.blockSize);
      if (end <= start) continue;
      const sample = sampled.has(req) && end === known - 1;
      seqs.push({ tokenIds: req.allTokenIds.slice(start + 1, end + 1), startPosition: start, blockTable: table, sample });
      for (let t = start; t < end; t++) carryRows.push(p.carryAt + t - start);
      if (sample) order.push(req);
    }
    const out = new Map<Request, { token: number; at: number }>();
    if (seqs.length === 0) return out;
    const batch = buildForwardBatch(seqs, this.blockSize);
    batch.carryRows = Int32Array.from(carryRows);
    const tokens = this.head.fromTarget(batch);
    order.forEach((req, i) => out.set(req, { token: tokens[i]!, at: batch.logitsIndices[i]! }));
    return out;
  }

  /**
   * One forward of the head over one-token rows on the carry's rows `at`; their greedy tokens. With graphs, the rows
   * are padded to their bucket as a decode graph's (rows that write nothing, on carry row 0) and the graph replayed.
   */
  private forward(seqs: ScheduledSeq[], at: number[]): Int32Array {
    const { graphs, maxNumSeqs } = this.headGraphs;
    const bucket = graphs ? graphBucket(seqs.length, maxNumSeqs) : null;
    if (graphs && bucket !== null) {
      const batch = buildForwardBatch(seqs, this.blockSize, bucket, true);
      batch.carryRows = new Int32Array(bucket);
      batch.carryRows.set(at);
      const ids = graphs.run(headGraphKey(bucket), batch, () => this.head.fromHead(batch));
      return this.head.toTarget(ids.slice(0, seqs.length));
    }
    const batch = buildForwardBatch(seqs, this.blockSize);
    batch.carryRows = Int32Array.from(at);
    return this.head.toTarget(this.head.fromHead(batch));
  }

  private set(row: ScheduledRequest, j: number, token: number): void {
    row.specTokenIds[j] = token;
    row.tokenIds[row.tokenIds.length - row.specTokenIds.length + j] = token;
  }
}
