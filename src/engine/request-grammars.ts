// The engine's structured-output requests: each waits, unscheduled, for its matcher from a grammar host
// (sampling/grammar-hosts.ts), then holds it until it ends. A request whose host failed under it is reported by
// broken() and ended by the engine with an error; the others never notice.

import { GrammarHosts, GrammarRequestEnded, type GrammarHostsOptions, type GrammarRequest } from '../sampling/grammar-hosts.js';
import { join } from 'node:path';
import type { ModelDir } from '../loader/model-dir.js';
import {
  ConstraintAfterToken, grammarVocabFromTokenizerJson, type GrammarVocab, type GrammarVocabFile, type StructuredOutputSpec,
  type TokenConstraint,
} from '../sampling/structured-output.js';

export class RequestGrammars {
  readonly hosts: GrammarHosts;
  /** Requests waiting for their matcher (not yet scheduled). */
  private readonly waiting = new Map<string, GrammarRequest>();
  /** Matchers of scheduled requests. */
  private readonly held = new Map<string, TokenConstraint>();

  constructor(vocab: GrammarVocabFile | (() => GrammarVocab), options: GrammarHostsOptions) {
    this.hosts = new GrammarHosts(vocab, options);
  }

  /** Asks for the request's matcher: `ready` with it, or `failed` with why (not after cancel()). */
  start(requestId: string, spec: StructuredOutputSpec, ready: (c: TokenConstraint) => void, failed: (why: string) => void): void {
    const r = this.hosts.request(spec);
    this.waiting.set(requestId, r);
    r.constraint.then((c) => {
      if (this.waiting.get(requestId) !== r) return c.dispose();
      this.waiting.delete(requestId);
      const held = spec.afterTokenId === undefined ? c : new ConstraintAfterToken(c, spec.afterTokenId);
      this.held.set(requestId, held);
      ready(held);
    }, (e: unknown) => {
      if (this.waiting.get(requestId) !== r || e instanceof GrammarRequestEnded) return;
      this.waiting.delete(requestId);
      failed((e as Error)?.message ?? String(e));
    });
  }

  /** Ends a request still waiting for its matcher (its compile ends if nobody else waits for it); false if none. */
  cancel(requestId: string): boolean {
    const r = this.waiting.get(requestId);
    if (r === undefined) return false;
    this.waiting.delete(requestId);
    r.cancel();
    return true;
  }

  /** Frees an ended request's matcher. */
  release(requestId: string): void {
    const c = this.held.get(requestId);
    if (c === undefined) return;
    this.held.delete(requestId);
    c.dispose();
  }

  /** Requests whose matcher failed (its host trapped, crashed or stalled), with why. */
  broken(): [string, string][] {
    const out: [string, string][] = [];
    for (const [id, c] of this.held) {
      const why = c.failure();
      if (why !== null) out.push([id, why]);
    }
    return out;
  }

  get numHeld(): number {
    return this.held.size;
  }

  get numWaiting(): number {
    return this.waiting.size;
  }

  /** Frees every matcher and ends every host at once (a compile in flight with it). */
  dispose(): Promise<void> {
    for (const id of [...this.held.keys()]) this.release(id);
    for (const id of [...this.waiting.keys()]) this.cancel(id);
    return this.hosts.close();
  }
}

/**
 * Where structured outputs' vocabulary comes from: a GGUF file's tokenizer is in memory; otherwise each grammar host
 * reads tokenizer.json in its own thread.
 */
export function grammarVocabOf(dir: ModelDir): GrammarVocabFile | (() => GrammarVocab) {
  return dir.tokenizerJson !== undefined
    ? () => grammarVocabFromTokenizerJson(dir.tokenizerJson!, dir.config.vocabSize, dir.generation.eosTokenIds)
    : { tokenizerJsonPath: join(dir.tokenizerDir, 'tokenizer.json'), vocabSize: dir.config.vocabSize,
      stopTokenIds: [...dir.generation.eosTokenIds] };
}
