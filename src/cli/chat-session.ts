// The loop of quire chat, apart from the model so a test can drive it: lines from readline, slash commands handled
// here (never sent to the model), Ctrl-C stopping an answer, a second Ctrl-C at the prompt (or Ctrl-D) leaving, and the
// history trimmed to the context.

import type { EventEmitter } from 'node:events';
import { createInterface } from 'node:readline';
import type { ChatMessage } from '../loader/types.js';
import { chatMessages, fitToContext, type ChatTurn } from './chat-history.js';

/** What the chat needs of a model. */
export interface ChatModel {
  /** The model's name, as the banner shows it. */
  readonly name: string;
  /** The backend and device, as the banner shows them. */
  readonly backend: string;
  readonly maxModelLen: number;
  render(messages: ChatMessage[]): Promise<string>;
  countTokens(prompt: string): number;
  /** The answer's text, streamed; the iterator's return() ends the request. */
  stream(prompt: string, maxTokens: number): AsyncIterable<string>;
}

export interface ChatIO {
  input: NodeJS.ReadableStream;
  output: NodeJS.WritableStream;
  /** A terminal: readline reads keys (Ctrl-C, Ctrl-D, arrows) and echoes. */
  terminal: boolean;
  /** Where 'SIGINT' comes from when the input is not a terminal (the process); a terminal's Ctrl-C comes through readline. */
  signals?: EventEmitter;
}

export interface ChatOptions {
  system: string | null;
  maxTokens: number;
}

export const CHAT_HELP = [
  '/help              this list',
  '/reset             forget the conversation (the system message stays)',
  '/history           how many turns are kept, and how much of the context they use',
  '/exit, /quit       leave (as do Ctrl-D, and Ctrl-C twice at the prompt)',
  'Ctrl-C             stop the answer being written',
  '//text             send a line that begins with "/" (as "/text")',
].join('\n');

type ChatEvent = { kind: 'line'; line: string } | { kind: 'interrupt' } | { kind: 'close' };

/** Events in arrival order; next() waits for one. */
class EventQueue {
  private readonly items: ChatEvent[] = [];
  private wake: (() => void) | null = null;

  push(e: ChatEvent): void {
    this.items.push(e);
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  async next(): Promise<ChatEvent> {
    for (;;) {
      const e = this.items.shift();
      if (e) return e;
      await new Promise<void>((r) => (this.wake = r));
    }
  }
}

export function chatBanner(model: ChatModel, opts: ChatOptions): string {
  const lines = [
    `quire chat: ${model.name} on ${model.backend}, context ${model.maxModelLen} tokens, answers up to ${opts.maxTokens} tokens`,
    'Type a message and press Enter. /help lists the commands; Ctrl-C stops an answer; Ctrl-D or /exit leaves.',
  ];
  if (opts.maxTokens >= model.maxModelLen) {
    lines.push(`note: --max-tokens ${opts.maxTokens} is not less than the context (${model.maxModelLen}): `
      + 'each answer gets what the context leaves after the conversation.');
  }
  return lines.join('\n') + '\n';
}

/** Runs the conversation until the user leaves; resolves then. */
export async function runChat(model: ChatModel, io: ChatIO, opts: ChatOptions): Promise<void> {
  const rl = createInterface({ input: io.input, output: io.output, terminal: io.terminal, prompt: '> ' });
  const events = new EventQueue();
  let answering: AbortController | null = null;
  const onInterrupt = (): void => {
    if (answering) answering.abort();
    else events.push({ kind: 'interrupt' });
  };
  rl.on('line', (line) => events.push({ kind: 'line', line }));
  rl.on('close', () => events.push({ kind: 'close' }));
  rl.on('SIGINT', onInterrupt);
  io.signals?.on('SIGINT', onInterrupt);
  const write = (s: string): void => void io.output.write(s);

  const turns: ChatTurn[] = [];
  let armed = false;
  write(chatBanner(model, opts));
  rl.prompt();
  try {
    for (;;) {
      const ev = await events.next();
      if (ev.kind === 'close') {
        write('\n');
        break;
      }
      if (ev.kind === 'interrupt') {
        if (armed) {
          write('\n');
          break;
        }
        armed = true;
        write('\n(press Ctrl-C again or Ctrl-D to leave; /help lists the commands)\n');
        rl.write(null, { ctrl: true, name: 'u' });
        rl.prompt();
        continue;
      }
      armed = false;
      const line = ev.line.trim();
      if (line === '') {
        rl.prompt();
        continue;
      }
      if (line.startsWith('/') && !line.startsWith('//')) {
        if (await slashCommand(line, turns, model, opts, write) === 'exit') break;
        rl.prompt();
        continue;
      }
      turns.push({ user: line.startsWith('//') ? line.slice(1) : line, assistant: null });
      answering = new AbortController();
      try {
        await answer(model, opts, turns, answering.signal, write);
      } catch (e) {
        turns.pop();
        write(`\nquire: the answer failed: ${(e as Error).message}\n`);
      } finally {
        answering = null;
      }
      rl.prompt();
    }
  } finally {
    io.signals?.off('SIGINT', onInterrupt);
    rl.close();
  }
}

async function answer(model: ChatModel, opts: ChatOptions, turns: ChatTurn[], signal: AbortSignal,
  write: (s: string) => void): Promise<void> {
  const fit = await fitToContext(opts.system, turns, { maxModelLen: model.maxModelLen, maxTokens: opts.maxTokens },
    (m) => model.render(m), (p) => model.countTokens(p));
  if ('tooLong' in fit) {
    write(`(not sent: with the chat template this message is ${fit.numPromptTokens} tokens, and the context holds `
      + `${model.maxModelLen}; shorten it)\n`);
    return;
  }
  if (fit.numDroppedTurns > 0) {
    write(`(the ${fit.numDroppedTurns === 1 ? 'oldest turn was' : `${fit.numDroppedTurns} oldest turns were`} dropped `
      + `to fit the context of ${model.maxModelLen} tokens)\n`);
  }
  const { text, interrupted } = await streamAnswer(model.stream(fit.prompt, fit.maxTokens), signal, write);
  write(interrupted ? '\n(stopped)\n' : '\n');
  turns[turns.length - 1]!.assistant = text.trim();
}

/** Writes the deltas until the stream ends or the signal fires (then the stream is returned, ending the request). */
export async function streamAnswer(stream: AsyncIterable<string>, signal: AbortSignal, write: (s: string) => void):
  Promise<{ text: string; interrupted: boolean }> {
  const it = stream[Symbol.asyncIterator]();
  const aborted = new Promise<'aborted'>((resolve) => {
    if (signal.aborted) resolve('aborted');
    signal.addEventListener('abort', () => resolve('aborted'), { once: true });
  });
  let text = '';
  for (;;) {
    const next = it.next();
    next.catch(() => {});
    const r = await Promise.race([next, aborted]);
    if (r === 'aborted') {
      it.return?.()?.catch(() => {});
      return { text, interrupted: true };
    }
    if (r.done) return { text, interrupted: false };
    write(r.value);
    text += r.value;
  }
}

async function slashCommand(line: string, turns: ChatTurn[], model: ChatModel, opts: ChatOptions,
  write: (s: string) => void): Promise<'exit' | void> {
  const name = line.split(/\s+/)[0]!;
  switch (name) {
    case '/exit':
    case '/quit':
      return 'exit';
    case '/help':
      write(CHAT_HELP + '\n');
      return;
    case '/reset':
    case '/clear': {
      const n = turns.length;
      turns.length = 0;
      write(`(conversation reset: ${n} turn${n === 1 ? '' : 's'} forgotten)\n`);
      return;
    }
    case '/history': {
      const numTokens = model.countTokens(await model.render(chatMessages(opts.system, turns)));
      write(`(${turns.length} turn${turns.length === 1 ? '' : 's'} kept, ${numTokens} of the ${model.maxModelLen} tokens `
        + 'of the context; the oldest turns go first when it is full)\n');
      return;
    }
    default:
      write(`(unknown command ${name}: /help lists the commands; //text sends a line that begins with "/")\n`);
  }
}
