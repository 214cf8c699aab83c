// Token ids -> text deltas that are final, with stop strings.
//
// Decoding uses the prefix/read offsets of vLLM and HF TGI: each new token is
// decoded inside a short window of the tokens before it, and the new text is
// the window's text past the text of the window without the new tokens.
//
//   ids:   ... | prefixOffset ........ readOffset ........ end |
//                 └ prefix text (already emitted) ┘└ new text ┘
//
// New text ending in U+FFFD (a byte-level token that splits a UTF-8 char) is
// held and the window grows until the char is complete. Text that might begin
// a stop string (the longest suffix that is a prefix of one) is held too, so a
// stop string is never cut across two deltas and never partly emitted.

import type { Tokenizer } from '../loader/types.js';

/** Prompt tokens in the first window (vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET). */
const INITIAL_PREFIX_TOKENS = 5;

export interface DetokenizerOptions {
  skipSpecialTokens: boolean;
  stop: readonly string[];
  includeStopStrInOutput: boolean;
  /** Stop strings that end within the text of the first minTokens tokens do not count (vLLM). */
  minTokens?: number;
}

export interface DetokenizerDelta {
  deltaText: string;
  stopped: boolean;
  stopString?: string;
}

export class IncrementalDetokenizer {
  private readonly ids: number[];
  private prefixOffset: number;
  private readOffset: number;
  /** Final text of the output so far (stop-truncated once stopped). */
  private outputText = '';
  private numEmittedChars = 0;
  /** Chars of outputText already searched for stop strings. */
  private numCheckedChars = 0;
  private numOutputTokens = 0;
  private stopString: string | null = null;

  constructor(
    private readonly tokenizer: Tokenizer,
    promptTokenIds: readonly number[],
    private readonly opts: DetokenizerOptions,
  ) {
    const context = promptTokenIds.slice(Math.max(0, promptTokenIds.length - INITIAL_PREFIX_TOKENS));
    this.ids = [...context];
    this.prefixOffset = 0;
    this.readOffset = this.ids.length;
  }

  get stopped(): boolean {
    return this.stopString !== null;
  }

  /** All text emitted so far. */
  get text(): string {
    return this.outputText.slice(0, this.numEmittedChars);
  }

  push(newTokenIds: readonly number[]): DetokenizerDelta {
    if (this.stopped) return { deltaText: '', stopped: true, stopString: this.stopString! };
    for (const id of newTokenIds) {
      this.ids.push(id);
      this.numOutputTokens++;
      this.outputText += this.decodeNew(false);
      if (this.numOutputTokens > (this.opts.minTokens ?? 0)) {
        if (this.checkStopStrings()) break;
      } else {
        this.numCheckedChars = this.outputText.length;
      }
    }
    return this.emit(false);
  }

  /** Flushes held text (an incomplete char, a possible stop prefix) at the end of generation. */
  finish(): DetokenizerDelta {
    if (this.stopped) return { deltaText: '', stopped: true, stopString: this.stopString! };
    this.outputText += this.decodeNew(true);
    if (this.numOutputTokens > (this.opts.minTokens ?? 0)) this.checkStopStrings();
    return this.emit(true);
  }

  private decode(ids: number[]): string {
    return this.tokenizer.decode(ids, { skipSpecialTokens: this.opts.skipSpecialTokens });
  }

  private decodeNew(flush: boolean): string {
    if (this.readOffset >= this.ids.length) return '';
    const prefixText = this.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const fullText = this.decode(this.ids.slice(this.prefixOffset));
    if (fullText === prefixText) {
      // The new tokens add no text here (skipped specials, ids the tokenizer lacks): drop them so the
      // window does not grow with every such token (each push would decode a longer window).
      this.ids.splice(this.readOffset);
      return '';
    }
    if (fullText.length <= prefixText.length || (!flush && fullText.endsWith('\uFFFD'))) return '';
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    // Keep the window short: drop tokens no later decode needs.
    if (this.prefixOffset > 0) {
      this.ids.splice(0, this.prefixOffset);
      this.readOffset -= this.prefixOffset;
      this.prefixOffset = 0;
    }
    return fullText.slice(prefixText.length);
  }

  /** First stop string to complete in the unchecked text; truncates outputText there. */
  private checkStopStrings(): boolean {
    const { stop } = this.opts;
    if (stop.length === 0) {
      this.numCheckedChars = this.outputText.length;
      return false;
    }
    let bestEnd = Infinity;
    let bestStart = Infinity;
    let best: string | null = null;
    for (const s of stop) {
      const from = Math.max(0, this.numCheckedChars - s.length + 1);
      const at = this.outputText.indexOf(s, from);
      if (at < 0) continue;
      const end = at + s.length;
      if (end < bestEnd || (end === bestEnd && at < bestStart)) {
        bestEnd = end;
        bestStart = at;
        best = s;
      }
    }
    this.numCheckedChars = this.outputText.length;
    if (best === null) return false;
    this.stopString = best;
    this.outputText = this.outputText.slice(0, this.opts.includeStopStrInOutput ? bestEnd : bestStart);
    return true;
  }

  private emit(final: boolean): DetokenizerDelta {
    const holdBack = final || this.stopped ? 0 : this.stopPrefixSuffixLength();
    const end = Math.max(this.numEmittedChars, this.outputText.length - holdBack);
    const deltaText = this.outputText.slice(this.numEmittedChars, end);
    this.numEmittedChars = end;
    if (this.stopString !== null) return { deltaText, stopped: true, stopString: this.stopString };
    return { deltaText, stopped: false };
  }

  /** Length of the longest suffix of outputText that is a proper prefix of a stop string. */
  private stopPrefixSuffixLength(): number {
    let longest = 0;
    for (const s of this.opts.stop) {
      for (let n = Math.min(s.length - 1, this.outputText.length); n > longest; n--) {
        if (this.outputText.endsWith(s.slice(0, n))) {
          longest = n;
          break;
        }
      }
    }
    return longest;
  }
}
