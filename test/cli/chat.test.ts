// quire chat, driven through readline as a terminal would drive it (keys into a PassThrough marked as a terminal):
// banner, slash commands handled locally, Ctrl-C stopping an answer and leaving only when pressed twice at the
// prompt, Ctrl-D leaving, and the history trimmed to the context.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { runChat, type ChatModel } from '../../src/cli/chat-session.js';
import { fitToContext, type ChatTurn } from '../../src/cli/chat-history.js';
import type { ChatMessage } from '../../src/loader/types.js';

/** A model whose prompt is the messages joined, one token a character, answering `reply` a character a tick. */
class FakeModel implements ChatModel {
  readonly name = 'fake';
  readonly backend = 'cpu (test)';
  readonly prompts: string[] = [];
  readonly maxTokensAsked: number[] = [];
  numReturned = 0;

  constructor(readonly maxModelLen: number, private readonly reply: string, private readonly tickMs = 1) {}

  async render(messages: ChatMessage[]): Promise<string> {
    return messages.map((m) => `${m.role}:${m.content}`).join('|');
  }

  countTokens(prompt: string): number {
    return prompt.length;
  }

  stream(prompt: string, maxTokens: number): AsyncIterable<string> {
    this.prompts.push(prompt);
    this.maxTokensAsked.push(maxTokens);
    const reply = this.reply;
    const tickMs = this.tickMs;
    const model = this;
    return {
      [Symbol.asyncIterator]() {
        let i = 0;
        return {
          async next() {
            await new Promise((r) => setTimeout(r, tickMs));
            return i < reply.length ? { value: reply[i++]!, done: false } : { value: undefined, done: true };
          },
          async return() {
            model.numReturned++;
            return { value: undefined, done: true };
          },
        };
      },
    };
  }
}

/** A chat on a fake terminal: type() sends keys, output() is what was written. */
function terminal(model: ChatModel, opts = { system: null as string | null, maxTokens: 8 }) {
  const input = new PassThrough();
  const output = new PassThrough();
  let written = '';
  output.on('data', (d: Buffer) => { written += d.toString(); });
  const done = runChat(model, { input, output, terminal: true, signals: new EventEmitter() }, opts);
  return {
    type: (keys: string) => input.write(keys),
    output: () => written,
    done,
    waitFor: async (re: RegExp, ms = 2000) => {
      const end = Date.now() + ms;
      while (!re.test(written)) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${re} in:\n${written}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    },
  };
}

test('the banner names the model, the backend, the context, how to leave and /help', async () => {
  const t = terminal(new FakeModel(100, 'ok'));
  t.type('\x04');
  await t.done;
  assert.match(t.output(), /quire chat: fake on cpu \(test\), context 100 tokens, answers up to 8 tokens/);
  assert.match(t.output(), /\/help lists the commands; Ctrl-C stops an answer; Ctrl-D or \/exit leaves/);
});

test('slash commands are handled locally and never sent to the model', async () => {
  const model = new FakeModel(1000, 'hi');
  const t = terminal(model);
  t.type('hello\r');
  await t.waitFor(/hi\n/);
  t.type('/help\r');
  await t.waitFor(/\/reset +forget the conversation/);
  t.type('/history\r');
  await t.waitFor(/1 turn kept, \d+ of the 1000 tokens/);
  t.type('/reset\r');
  await t.waitFor(/conversation reset: 1 turn forgotten/);
  t.type('/nope\r');
  await t.waitFor(/unknown command \/nope/);
  t.type('again\r');
  await t.waitFor(/hi\n[^]*hi\n/);
  t.type('/exit\r');
  await t.done;
  assert.deepEqual(model.prompts, ['user:hello', 'user:again'], 'only the two messages reached the model, the second without the reset history');
});

test('Ctrl-C during an answer stops it and the chat stays; Ctrl-C twice at the prompt leaves', async () => {
  const model = new FakeModel(1000, 'a'.repeat(400), 5);
  const t = terminal(model);
  t.type('tell me\r');
  await t.waitFor(/aaa/);
  t.type('\x03');
  await t.waitFor(/\(stopped\)/);
  assert.equal(model.numReturned, 1, 'the stream was returned (the request ended)');
  t.type('next\r');
  await t.waitFor(/aaa[^]*aaa/);
  t.type('\x03');
  await t.waitFor(/\(stopped\)[^]*\(stopped\)/);
  assert.equal(model.prompts.length, 2);
  assert.match(model.prompts[1]!, /assistant:a+\|user:next/, 'the stopped answer stays in the history as far as it went');
  t.type('\x03');
  await t.waitFor(/press Ctrl-C again or Ctrl-D to leave/);
  t.type('\x03');
  await t.done;
});

test('one Ctrl-C at the prompt does not leave: typing a message disarms it', async () => {
  const model = new FakeModel(1000, 'ok');
  const t = terminal(model);
  t.type('\x03');
  await t.waitFor(/press Ctrl-C again/);
  t.type('hello\r');
  await t.waitFor(/ok\n/);
  t.type('\x03');
  await t.waitFor(/press Ctrl-C again[^]*press Ctrl-C again/);
  t.type('\x04');
  await t.done;
  assert.deepEqual(model.prompts, ['user:hello']);
});

test('a long conversation drops its oldest turns with a note instead of failing', async () => {
  // each turn costs ~"user:xxxxxxxxxx|assistant:ok" = 30 tokens; 100 of context less 8 of answer leaves room for 3
  const model = new FakeModel(100, 'ok');
  const t = terminal(model);
  for (let i = 0; i < 5; i++) {
    t.type(`message ${i}!\r`);
    await t.waitFor(new RegExp(`(ok\\n[^]*){${i + 1}}`));
  }
  t.type('/exit\r');
  await t.done;
  assert.match(t.output(), /\(the oldest turn was dropped to fit the context of 100 tokens\)/);
  for (const p of model.prompts) assert.ok(p.length + 8 <= 100, `prompt of ${p.length} tokens fits`);
  assert.match(model.prompts.at(-1)!, /^user:message 2!\|assistant:ok\|user:message 3!\|assistant:ok\|user:message 4!$/);
});

test('a message longer than the context is not sent, with a note; the chat goes on', async () => {
  const model = new FakeModel(40, 'ok');
  const t = terminal(model);
  t.type(`${'x'.repeat(60)}\r`);
  await t.waitFor(/not sent: with the chat template this message is 65 tokens, and the context holds 40/);
  t.type('short\r');
  await t.waitFor(/ok\n/);
  t.type('\x04');
  await t.done;
  assert.deepEqual(model.prompts, ['user:short']);
});

test('fitToContext: max_tokens above half the context keeps history within half, and the answer gets the rest', async () => {
  const render = async (m: ChatMessage[]) => m.map((x) => x.content).join('');
  const turns: ChatTurn[] = [{ user: 'a'.repeat(30), assistant: 'b'.repeat(30) }, { user: 'c'.repeat(20), assistant: null }];
  const fit = await fitToContext(null, turns, { maxModelLen: 200, maxTokens: 3000 }, render, (p) => p.length);
  assert.ok(!('tooLong' in fit));
  assert.equal(fit.numDroppedTurns, 0);
  assert.equal(fit.maxTokens, 200 - 80);
  const fit2 = await fitToContext(null, turns, { maxModelLen: 100, maxTokens: 3000 }, render, (p) => p.length);
  assert.ok(!('tooLong' in fit2));
  assert.equal(fit2.numDroppedTurns, 1);
  assert.equal(fit2.maxTokens, 80);
});

test('piped input: every line is read, even those sent before the model was ready', async () => {
  const model = new FakeModel(1000, 'ok');
  const input = new PassThrough();
  const output = new PassThrough();
  let written = '';
  output.on('data', (d: Buffer) => { written += d.toString(); });
  input.end('one\n/help\ntwo\n');
  await new Promise((r) => setTimeout(r, 20));
  await runChat(model, { input, output, terminal: false }, { system: 'be brief', maxTokens: 8 });
  assert.deepEqual(model.prompts, ['system:be brief|user:one', 'system:be brief|user:one|assistant:ok|user:two']);
  assert.match(written, /\/reset/);
});
