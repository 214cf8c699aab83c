// Structured outputs (vLLM's response_format / structured_outputs) through xgrammar, the grammar engine vLLM
// uses, in its WebAssembly build: a request's JSON schema or choice list compiles against the model's vocabulary; each
// request gets a matcher that masks the tokens its grammar does not allow at every step and advances on the token
// sampled. Masked rows are sampled on the host (see device-sampling.ts). Compiles and matchers live in grammar hosts,
// worker threads of their own (grammar-hosts.ts), never on the engine thread; this file holds what they share with
// the API's compile check (api/pool-worker.ts): loading xgrammar, compiling a spec, reading a failure.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import type * as XG from '@mlc-ai/web-xgrammar';

/**
 * What a request's output must match. `json` holds a JSON schema as text, `grammar` xgrammar's EBNF,
 * `structural_tag` xgrammar's structural tag as JSON text ({"type": "structural_tag", "format": {...}}). With
 * `afterTokenId` the grammar holds only after that token (a reasoning parser's end of thinking, as vLLM: the
 * model thinks freely, then answers in the format).
 */
export type StructuredOutputSpec = ({ type: 'json'; schema: string } | { type: 'choice'; choices: string[] }
  | { type: 'regex'; pattern: string } | { type: 'grammar'; ebnf: string } | { type: 'structural_tag'; tag: string })
  & { afterTokenId?: number };

/** A request's grammar state, consulted by the host sampler. */
export interface TokenConstraint {
  /** Sets the logits of the tokens the grammar does not allow next to -Infinity. */
  maskLogits(row: Float32Array, vocab: number): void;
  /**
   * Advances past a sampled token. It returns nothing: a matcher in a grammar host takes the token without the
   * engine waiting for it (a sampled token was allowed by the mask, so the grammar takes it).
   */
  accept(tokenId: number): void;
  /** Why the constraint can no longer be used (its grammar host failed); null while it works. */
  failure(): string | null;
  dispose(): void;
}

type XGrammar = typeof XG;
let loaded: XGrammar | null = null;
/** xgrammar's last fatal message: its C++ checks print it, then abort the call with a bare "Aborted()". */
let lastFatal: string | null = null;

/**
 * The package is a UMD bundle inside a `"type": "module"` package (it reaches for `require` and `__filename`,
 * which ES modules do not have): run it as the CommonJS module it is written as, without touching globals. Its
 * console is ours, so that the reason of a refused schema or grammar reaches the request's error, not stderr.
 */
export function xgrammar(): XGrammar {
  if (loaded === null) {
    const req = createRequire(import.meta.url);
    const file = req.resolve('@mlc-ai/web-xgrammar');
    const mod = { exports: {} as XGrammar };
    const keep = (...args: unknown[]) => {
      const line = args.map(String).join(' ');
      const fatal = /\[FATAL\][^:]*:\d+: (.*)/s.exec(line);
      if (fatal) lastFatal = fatal[1]!.trim().slice(0, MAX_REASON_CHARS);
      else if (line.trim() !== 'Aborted()') console.error(xgrammarLogLine(line));
    };
    const quiet = { ...console, error: keep, warn: keep };
    new Function('exports', 'module', 'require', '__filename', '__dirname', 'console', readFileSync(file, 'utf8'))(
      mod.exports, mod, req, file, dirname(file), quiet);
    loaded = mod.exports;
  }
  return loaded;
}

/** The longest reason of xgrammar's that reaches an error message. */
const MAX_REASON_CHARS = 400;

/**
 * One of xgrammar's log lines as we print it: without the source paths of its build machine ("/home/.../x.cc:12:"),
 * and short (a corrupted instance once printed megabytes of its heap).
 */
export function xgrammarLogLine(line: string): string {
  const clean = line.replace(/(?:[\w.-]*\/)+[\w.-]+\.(?:cc|cpp|h|hpp)(?::\d+)*:?\s*/g, '').trim();
  return `xgrammar: ${clean.length > 200 ? `${clean.slice(0, 200)}...` : clean}`;
}

/**
 * An xgrammar call that failed. `trapped`: the WebAssembly instance aborted or trapped (a C++ check, an out of bounds
 * access, a stack overflow); it must not be used again. `reason`: xgrammar's own message for the input, when it gave
 * one (the input's fault); null when it did not (a server error, whose message must not reach a client).
 */
export class GrammarCompileError extends Error {
  constructor(readonly reason: string | null, readonly trapped: boolean) {
    super(reason ?? 'the grammar compiler failed');
    this.name = 'GrammarCompileError';
  }
}

/** Runs an xgrammar call; a failure is a GrammarCompileError with xgrammar's own reason. */
export async function withReason<T>(call: () => Promise<T>): Promise<T> {
  lastFatal = null;
  try {
    return await call();
  } catch (e) {
    const trapped = (e as Error)?.name === 'RuntimeError' || e instanceof RangeError || typeof e !== 'object'
      || /Aborted\(|memory access out of bounds|unreachable/.test(String((e as Error)?.message));
    // a C++ check that refused the input (its [FATAL] line said why) leaves the instance usable: a later grammar
    // compiles as before; anything else (an out of bounds access, a stack overflow) spends it
    if (lastFatal !== null) throw new GrammarCompileError(lastFatal, false);
    // a C++ exception reaches JavaScript as a bare number (its address): xgrammar refused the input, reason unknown
    if (typeof e === 'number') throw new GrammarCompileError('xgrammar refused it (no reason given)', true);
    if (trapped) throw new GrammarCompileError(null, true);
    throw new GrammarCompileError((e instanceof Error ? e.message : String(e)).slice(0, MAX_REASON_CHARS), false);
  }
}

/** Drops the loaded instance: the next xgrammar() call starts a fresh one (after a trap). */
export function resetXgrammar(): void {
  loaded = null;
}

/** A choice list in xgrammar's EBNF. */
function choiceGrammar(choices: readonly string[]): string {
  return `root ::= ${choices.map((c) => JSON.stringify(c)).join(' | ')}`;
}

const regexTag = (pattern: string) => ({ type: 'structural_tag' as const, format: { type: 'regex' as const, pattern } });

/** Checks a spec without a vocabulary: throws a GrammarCompileError when it does not compile. */
export async function checkStructuredOutput(spec: StructuredOutputSpec): Promise<void> {
  const xg = xgrammar();
  const g = await withReason(() => {
    switch (spec.type) {
      case 'json': return xg.Grammar.fromJSONSchema(spec.schema, false);
      case 'choice': return xg.Grammar.fromEBNF(choiceGrammar(spec.choices));
      case 'regex': return xg.Grammar.fromStructuralTag(regexTag(spec.pattern));
      case 'grammar': return xg.Grammar.fromEBNF(spec.ebnf);
      case 'structural_tag': return xg.Grammar.fromStructuralTag(spec.tag);
    }
  });
  g.dispose();
}

/** Compiles a spec against a compiler's vocabulary (what the engine will do with it). */
export function compileSpec(c: XG.GrammarCompiler, spec: StructuredOutputSpec): Promise<XG.CompiledGrammar> {
  return withReason(() => {
    switch (spec.type) {
      case 'json': return c.compileJSONSchema(spec.schema, false);
      case 'choice': return c.compileGrammar(choiceGrammar(spec.choices));
      case 'regex': return c.compileStructuralTag(regexTag(spec.pattern));
      case 'grammar': return c.compileGrammar(spec.ebnf);
      case 'structural_tag': return c.compileStructuralTag(spec.tag);
    }
  });
}

/** A grammar compiler over `v` in the loaded instance. */
export async function createGrammarCompiler(v: GrammarVocab): Promise<XG.GrammarCompiler> {
  const xg = xgrammar();
  const info = await xg.TokenizerInfo.createTokenizerInfo(v.encodedVocab, v.vocabType, false, v.vocabSize, v.stopTokenIds);
  return xg.GrammarCompiler.createGrammarCompiler(info);
}

/** The model's vocabulary as xgrammar reads it (tokenizer.json's strings, its byte encoding). */
export interface GrammarVocab {
  encodedVocab: string[];
  vocabType: 'byte_level' | 'byte_fallback' | 'raw';
  /** Width of a logits row. */
  vocabSize: number;
  stopTokenIds: number[];
}

/** Where a thread reads the vocabulary itself (a 151k-token tokenizer.json takes the best part of a second). */
export interface GrammarVocabFile {
  tokenizerJsonPath: string;
  /** Width of a logits row. */
  vocabSize: number;
  stopTokenIds: number[];
}

export function readGrammarVocab(f: GrammarVocabFile): GrammarVocab {
  const json = JSON.parse(readFileSync(f.tokenizerJsonPath, 'utf8')) as Record<string, unknown>;
  return grammarVocabFromTokenizerJson(json, f.vocabSize, f.stopTokenIds);
}

/** tokenizer.json -> GrammarVocab. */
export function grammarVocabFromTokenizerJson(json: Record<string, unknown>, vocabSize: number, stopTokenIds: number[]): GrammarVocab {
  const model = json.model as { vocab?: Record<string, number> } | undefined;
  const encodedVocab: string[] = [];
  for (const [token, id] of Object.entries(model?.vocab ?? {})) encodedVocab[id] = token;
  for (const t of (json.added_tokens ?? []) as { id: number; content: string }[]) encodedVocab[t.id] = t.content;
  for (let i = 0; i < encodedVocab.length; i++) encodedVocab[i] ??= '';
  const decoder = JSON.stringify(json.decoder ?? null);
  const vocabType = decoder.includes('"ByteLevel"') ? 'byte_level' : decoder.includes('"ByteFallback"') ? 'byte_fallback' : 'raw';
  return { encodedVocab, vocabType, vocabSize, stopTokenIds };
}

/** A constraint that holds from the token after `endTokenId` on (free text before it). */
export class ConstraintAfterToken implements TokenConstraint {
  private active = false;

  constructor(private readonly inner: TokenConstraint, private readonly endTokenId: number) {}

  maskLogits(row: Float32Array, vocab: number): void {
    if (this.active) this.inner.maskLogits(row, vocab);
  }

  accept(tokenId: number): void {
    if (this.active) this.inner.accept(tokenId);
    else if (tokenId === this.endTokenId) this.active = true;
  }

  failure(): string | null {
    return this.inner.failure();
  }

  dispose(): void {
    this.inner.dispose();
  }
}
