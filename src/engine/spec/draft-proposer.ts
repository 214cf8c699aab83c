// A draft model's proposals (vLLM's draft_model method): a smaller model with the target's tokenizer, on a backend of
// its own, proposes k tokens greedily for each row the scheduler gave room for.
//
// Its KV cache has the target's page ids: a page the target's block table holds holds the draft's K and V of the
// same positions too, so the draft needs no allocator, no prefix cache and no rollback of its own. The scheduler
// allocates a verify row's pages for its last token and k proposals before the draft runs (the proposals are
// placeholders until then: SpecDecoding.propose), and the draft writes positions n-2 .. n+k-2 of a request of n
// tokens: all inside what the request holds. What the draft computed stays valid where its input was the real token:
// every position before n, and the proposals the target accepted; the next fill starts from there.
//
// The forwards replay the draft's CUDA graphs: one token a row for proposals 2 .. k (one graph per batch-size bucket,
// as the target's decode steps), two a row for the catch-up. The draft has then computed all but the last proposal:
// when the target accepts all k, two tokens are new (the last proposal and the target's next); when it rejects one,
// only the target's token is, and the catch-up starts a token early, recomputing K and V the draft already holds (the
// same values: same token, same context), so that every catch-up after a request's first (its prompt, eager) is
// two tokens a row, one graph, one forward fewer than feeding the last proposal would cost.
//
// A proposal never decides a token: the target verifies each one (greedy: the longest matching prefix; sampling:
// rejection sampling against the draft's point mass), so a draft that is wrong, stale or fails costs speed only.

import { buildForwardBatch, type ScheduledSeq } from '../batch-builder.js';
import type { Model } from '../../model/model.js';
import { captureDecodeGraphs } from '../runner/model-runner.js';
import { runDeviceStep } from '../runner/device-steps.js';
import { uniformGraphBatch } from '../runner/graph-buckets.js';
import { TOKEN_READS_IN_FLIGHT } from '../../backend/backend.js';
import { readKnob } from '../../knobs/knobs.js';
import type { Request } from '../../scheduler/request.js';

/** A verify row to fill: its request, its pages, and the k placeholders the scheduler scheduled after its last token. */
export interface DraftRow {
  req: Request;
  blockTable: readonly number[];
  /** The row's proposals, filled in place (the scheduled row's tokenIds end with the same values, also filled). */
  specTokenIds: number[];
  tokenIds: number[];
  /** The row's KV length after the step: its request's real tokens and the k proposals. */
  seqLen: number;
}

/** What the draft computed for a request: valid KV before `valid` once it is cut at what the target kept. */
interface DraftState {
  /** Positions whose draft K and V may be reused, at most (cut at the request's known tokens minus one). */
  valid: number;
  /** The request's preemptions when they were computed: a preempted request's pages went back to the pool. */
  preemptions: number;
}

export class DraftProposer {
  /** Per request (a request object lives as long as the request; nothing to clean up). */
  private readonly states = new WeakMap<Request, DraftState>();
  /** Forwards that failed (each fell back to its rows' last token as proposals: rejected unless the target agrees). */
  numFailures = 0;

  constructor(readonly model: Model, private readonly blockSize: number,
    /** The draft's own context limit: proposals stop short of it (SpecDecoding.propose). */
    readonly maxPositions: number,
    /** Most tokens a draft forward takes (the engine's step budget: the draft's workspace was sized for it). */
    private readonly maxNumBatchedTokens: number,
    /** The draft's graph buckets (the engine's --max-num-seqs) and whether it runs eagerly. */
    private readonly graphOptions: { maxNumSeqs: number; enforceEager: boolean } = { maxNumSeqs: 0, enforceEager: true },
    /**
     * Proposal forwards launched back to back (QUIRE_DRAFT_CHAIN): each row's input is the token the forward before
     * sampled for it, read where it was sampled (async scheduling's negative input ids), the host waiting only for
     * reads TOKEN_READS_IN_FLIGHT - 1 behind; otherwise each forward's tokens reach the host before the next.
     */
    private readonly chain: boolean = readKnob('QUIRE_DRAFT_CHAIN')) {}

  /** Captures the draft's one-token graphs (after its KV cache is allocated: a graph names the cache's address). */
  captureGraphs(): void {
    captureDecodeGraphs(this.model, { ...this.graphOptions, blockSize: this.blockSize });
  }

  /**
   * Fills each row's placeholders with the draft's greedy proposals: one forward over each row's tokens the draft
   * has not seen (the tokens accepted last step and the target's next one; a new request's whole prompt), then
   * one forward per further proposal, of the rows that still want one.
   */
  fill(rows: readonly DraftRow[]): void {
    if (rows.length === 0) return;
    const work = rows.map((r) => {
      const k = r.specTokenIds.length;
      // the request's real tokens (allTokenIds holds this step's sampling placeholder after them)
      const n = r.seqLen - k;
      let st = this.states.get(r.req);
      if (st === undefined || st.preemptions !== r.req.numPreemptions) st = { valid: 0, preemptions: r.req.numPreemptions };
      const from = Math.min(st.valid, n - 2);
      return { r, k, n, from };
    });
    let filled = 0;
    try {
      const first = this.catchUp(work);
      work.forEach((w) => this.set(w.r, 0, first.get(w)!));
      filled = 1;
      // proposal j is fed at n + j - 1 for proposal j + 1
      const inFlight: { rows: typeof work; j: number; wait: () => Int32Array }[] = [];
      const settle = (upTo: number) => {
        while (inFlight.length > upTo) {
          const { rows, j, wait } = inFlight.shift()!;
          const tokens = wait();
          rows.forEach((w, i) => this.set(w.r, j, tokens[i]!));
          filled = j + 1;
        }
      };
      let before = new Map<(typeof work)[number], number>();
      for (let j = 1, active = work.filter((w) => w.k > 1); active.length > 0; j++, active = active.filter((w) => w.k > j)) {
        const wait = this.launch(active.map((w) => ({ startPosition: w.n + j - 1, blockTable: w.r.blockTable, sample: true,
          tokenIds: [j > 1 && this.chain ? -(before.get(w)! + 1) : w.r.specTokenIds[j - 1]!] })));
        inFlight.push({ rows: active, j, wait });
        if (this.chain) before = new Map(active.map((w, i) => [w, i]));
        settle(this.chain ? TOKEN_READS_IN_FLIGHT - 2 : 0);
      }
      settle(0);
    } catch {
      this.numFailures++;
      // the rows keep what was filled; the rest propose their last real token (verified like any proposal)
      for (const { r, k, n } of work) for (let j = filled; j < k; j++) this.set(r, j, r.req.allTokenIds[n - 1]!);
    }
    // computed: the positions before n, then proposal i at n + i - 1 for each i fed (1 .. k-1 when no forward
    // failed); right up to the first the target rejects, which the next fill's cut at its n - 2 finds. A forward
    // that failed computed nothing sure: a failed catch-up leaves what was valid before it.
    for (const { r, k, n, from } of work) {
      this.states.set(r.req, { valid: filled === 0 ? from : n + Math.min(filled - 1, k - 1), preemptions: r.req.numPreemptions });
    }
  }

  /**
   * The forwards over each row's tokens the draft has not seen, positions from .. n - 1, at most maxNumBatchedTokens
   * a forward (a new request's whole prompt may come at once); returns each row's greedy token after position n - 1.
   */
  private catchUp<W extends { r: DraftRow; n: number; from: number }>(work: readonly W[]): Map<W, number> {
    const out = new Map<W, number>();
    const at = new Map(work.map((w) => [w, w.from]));
    while (at.size > 0) {
      let budget = this.maxNumBatchedTokens;
      const seqs: ScheduledSeq[] = [];
      const sampled: W[] = [];
      for (const [w, from] of at) {
        if (budget <= 0) break;
        const take = Math.min(w.n - from, budget);
        const done = from + take === w.n;
        seqs.push({ tokenIds: w.r.req.allTokenIds.slice(from, from + take), startPosition: from, blockTable: w.r.blockTable,
          sample: done });
        budget -= take;
        if (done) {
          sampled.push(w);
          at.delete(w);
        } else {
          at.set(w, from + take);
        }
      }
      const tokens = this.forward(seqs);
      sampled.forEach((w, i) => out.set(w, tokens[i]!));
    }
    return out;
  }

  /** Frees the draft's backend (its weights, KV cache and workspace). */
  dispose(): void {
    this.model.backend.dispose();
  }

  private set(r: DraftRow, j: number, token: number): void {
    r.specTokenIds[j] = token;
    r.tokenIds[r.tokenIds.length - r.specTokenIds.length + j] = token;
  }

  /** Greedy tokens of the rows' last positions; rows of one length replay a graph where the draft has them. */
  private forward(seqs: ScheduledSeq[]): Int32Array {
    return this.launch(seqs)();
  }

  /** forward(), launched: the returned function waits for the tokens. */
  private launch(seqs: ScheduledSeq[]): () => Int32Array {
    const graphs = this.graphOptions.enforceEager ? undefined : this.model.backend.graphs;
    const graphed = graphs ? uniformGraphBatch(seqs, this.blockSize, this.graphOptions.maxNumSeqs, this.maxNumBatchedTokens) : null;
    const step = runDeviceStep(this.model, graphs, graphed ? { op: 'tokens', batch: graphed.batch, graphKey: graphed.key }
      : { op: 'tokens', batch: buildForwardBatch(seqs, this.blockSize), graphKey: null });
    const { wait } = step as Extract<typeof step, { op: 'tokens' }>;
    return () => wait().subarray(0, seqs.length);
  }
}
