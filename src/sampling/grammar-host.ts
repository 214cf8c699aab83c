// A grammar host: a worker thread with an xgrammar instance over the model's vocabulary, which compiles grammars and
// holds the matchers made from them (a matcher must live in the instance that compiled its grammar: xgrammar's
// WebAssembly build cannot move one). grammar-hosts.ts sends it a compile only while it holds no matcher, so the
// engine, which waits on a host only for a matcher's mask, never waits behind a compile. The engine reaches its
// matchers through shared memory (grammar-channel.ts); messages carry the rest, handled one at a time in order.
// A trap spends the instance: the host says so in its doorbell and to the engine, and does nothing more.

import { parentPort, workerData } from 'node:worker_threads';
import type * as XG from '@mlc-ai/web-xgrammar';
import {
  compileSpec, createGrammarCompiler, GrammarCompileError, readGrammarVocab, withReason, xgrammar, type GrammarVocab,
  type GrammarVocabFile, type StructuredOutputSpec,
} from './structured-output.js';
import { BELL_DEAD, BELL_RING, CH_DONE, CH_SENT, channelMask, channelToken } from './grammar-channel.js';

export interface GrammarHostInit {
  /** The vocabulary, or where this thread reads it (so that the engine's thread does not). */
  vocab: GrammarVocab | GrammarVocabFile;
  /** The host's doorbell (grammar-channel.ts). */
  bell: Int32Array;
}

export type ToHost =
  | { type: 'compile'; key: string; spec: StructuredOutputSpec }
  | { type: 'match'; id: number; key: string; channel: Int32Array }
  | { type: 'release'; id: number }
  | { type: 'drop'; key: string };

export type FromHost =
  /** A compile begins (the host has finished what was before it). */
  | { type: 'compiling'; key: string }
  | { type: 'compiled'; key: string; ok: true }
  /** `reason`: xgrammar's, for the input (null: a server error); `trapped`: the host is spent. */
  | { type: 'compiled'; key: string; ok: false; reason: string | null; trapped: boolean }
  | { type: 'matched'; id: number; ok: boolean; reason?: string }
  | { type: 'trapped' }
  | { type: 'broken'; message: string };

interface Held {
  matcher: XG.GrammarMatcher;
  ch: Int32Array;
  /** Tokens taken so far. */
  done: number;
}

const port = parentPort!;
const { vocab, bell } = workerData as GrammarHostInit;
const post = (m: FromHost): void => port.postMessage(m);
const grammars = new Map<string, XG.CompiledGrammar>();
const held = new Map<number, Held>();
let compiler: XG.GrammarCompiler | null = null;
let spent = false;

/** The instance can no longer be trusted: the engine's waits on it end at once, and the engine replaces this host. */
function spend(): void {
  if (spent) return;
  spent = true;
  Atomics.store(bell, BELL_DEAD, 1);
  for (const h of held.values()) Atomics.notify(h.ch, CH_DONE);
  post({ type: 'trapped' });
}

// Messages and the doorbell's work run one at a time, in order (xgrammar's calls are async in name only).
let chain: Promise<void> = (async () => {
  try {
    compiler = await createGrammarCompiler('tokenizerJsonPath' in vocab ? readGrammarVocab(vocab) : vocab);
  } catch (e) {
    spent = true;
    post({ type: 'broken', message: String((e as Error)?.message ?? e).slice(0, 400) });
  }
})();

function enqueue(work: () => Promise<void>): Promise<void> {
  chain = chain.then(async () => {
    if (!spent) await work();
  }).catch(spend);
  return chain;
}

async function fillMask(h: Held): Promise<void> {
  const words = await h.matcher.getNextTokenBitmask();
  channelMask(h.ch).set(words.subarray(0, channelMask(h.ch).length));
}

async function handle(m: ToHost): Promise<void> {
  switch (m.type) {
    case 'compile':
      post({ type: 'compiling', key: m.key });
      try {
        grammars.set(m.key, await compileSpec(compiler!, m.spec));
        post({ type: 'compiled', key: m.key, ok: true });
      } catch (e) {
        const ce = e instanceof GrammarCompileError ? e : new GrammarCompileError(null, true);
        post({ type: 'compiled', key: m.key, ok: false, reason: ce.reason, trapped: ce.trapped });
        if (ce.trapped) spend();
      }
      break;
    case 'match': {
      const grammar = grammars.get(m.key);
      if (grammar === undefined) {
        post({ type: 'matched', id: m.id, ok: false, reason: 'the grammar is not compiled here' });
        break;
      }
      let matcher: XG.GrammarMatcher;
      try {
        matcher = await withReason(() => xgrammar().GrammarMatcher.createGrammarMatcher(grammar));
      } catch (e) {
        // a refusal leaves the instance usable; anything else spends it (the catch in enqueue)
        if (!(e instanceof GrammarCompileError) || e.trapped || e.reason === null) throw e;
        post({ type: 'matched', id: m.id, ok: false, reason: e.reason });
        break;
      }
      const h: Held = { matcher, ch: m.channel, done: 0 };
      await fillMask(h);
      held.set(m.id, h);
      post({ type: 'matched', id: m.id, ok: true });
      break;
    }
    case 'release':
      held.get(m.id)?.matcher.dispose();
      held.delete(m.id);
      break;
    case 'drop':
      grammars.get(m.key)?.dispose();
      grammars.delete(m.key);
      break;
  }
}

/** Takes the tokens the engine sent to each matcher, and writes the mask of the state they lead to. */
async function serveMatchers(): Promise<void> {
  for (const h of held.values()) {
    const sent = Atomics.load(h.ch, CH_SENT);
    if (sent === h.done) continue;
    for (; h.done < sent; h.done++) h.matcher.acceptToken(channelToken(h.ch, h.done));
    // a matcher past its stop token has no next mask (xgrammar refuses to make one); its request has ended
    if (!h.matcher.isTerminated()) await fillMask(h);
    Atomics.store(h.ch, CH_DONE, h.done);
    Atomics.notify(h.ch, CH_DONE);
  }
}

port.on('message', (m: ToHost) => void enqueue(() => handle(m)));

/** Atomics.waitAsync (Node 16+; the ES2024 lib, newer than this project's, declares it). */
const waitAsync = (Atomics as unknown as {
  waitAsync(a: Int32Array, i: number, v: number): { async: false; value: string } | { async: true; value: Promise<string> };
}).waitAsync;

// The parent port's listener keeps this thread alive: a pending waitAsync does not (nodejs/node#44729).
void (async () => {
  let seen = 0;
  while (!spent) {
    const w = waitAsync(bell, BELL_RING, seen);
    if (w.async) await w.value;
    seen = Atomics.load(bell, BELL_RING);
    await enqueue(serveMatchers);
  }
})();
