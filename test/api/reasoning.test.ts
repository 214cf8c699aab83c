// Reasoning split (--reasoning-parser qwen3 / deepseek_r1): whole outputs, the stream splitter (which must agree
// with the whole-output split for any cut into deltas), and reasoning followed by tool calls.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import OpenAI from 'openai';
import { ChatOutputStream, parseChatOutput, type ChatOutputOptions } from '../../src/api/chat-output.js';
import { promptOpensThinking, reasoningEndToken, ReasoningStreamSplitter, splitReasoning } from '../../src/api/reasoning.js';
import { ConstraintAfterToken } from '../../src/sampling/structured-output.js';
import { loadTokenizer } from '../../src/loader/tokenizer.js';
import { QWEN3_TOKENIZER_DIR } from '../loader/helpers.js';
import { ByteTokenizer } from './helpers/fake-tokenizer.js';
import { MODEL, postJson, startTestServer, type TestServer } from './helpers/start.js';

/** Cuts `text` at the given positions. */
function cut(text: string, cuts: number[]): string[] {
  const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
  return [0, ...at].map((from, i) => text.slice(from, [...at, text.length][i]));
}

describe('splitReasoning', () => {
  it('puts a leading <think> block in reasoning and the rest in content', () => {
    assert.deepEqual(splitReasoning('<think>\nHmm.\n</think>\n\nYes.', false), { reasoning: '\nHmm.\n', content: '\n\nYes.' });
  });

  it('leaves an output without a leading <think> as content, tags and all', () => {
    assert.deepEqual(splitReasoning('Yes. </think> no', false), { reasoning: null, content: 'Yes. </think> no' });
  });

  it('reads up to </think> as reasoning when the prompt opened the block; all reasoning when it never closes', () => {
    assert.deepEqual(splitReasoning('Hmm.</think>Yes.', true), { reasoning: 'Hmm.', content: 'Yes.' });
    assert.deepEqual(splitReasoning('<think>Still thinking', false), { reasoning: 'Still thinking', content: null });
    assert.deepEqual(splitReasoning('Hmm.</think>', true), { reasoning: 'Hmm.', content: null });
  });

  it('knows a prompt that ends inside an open <think> from one that closed it', () => {
    assert.equal(promptOpensThinking('<|im_start|>assistant\n<think>\n'), true);
    assert.equal(promptOpensThinking('<|im_start|>assistant\n<think>\n\n</think>\n\n'), false);
    assert.equal(promptOpensThinking('<|im_start|>assistant\n'), false);
    assert.equal(promptOpensThinking('<think> a </think> <think> b'), false);
  });
});

describe('ReasoningStreamSplitter', () => {
  it('holds back only what may be a tag', () => {
    const s = new ReasoningStreamSplitter(false);
    assert.deepEqual(s.push('<thi'), { reasoning: '', content: '' });
    assert.deepEqual(s.push('nk>Let me see </th'), { reasoning: 'Let me see ', content: '' });
    assert.deepEqual(s.push('ink>\nIt is 4.'), { reasoning: '', content: '\nIt is 4.' });
    assert.deepEqual(s.finish(), { reasoning: '', content: '' });
    const plain = new ReasoningStreamSplitter(false);
    assert.deepEqual(plain.push('<b>old</b>'), { reasoning: '', content: '<b>old</b>' });
  });

  it('agrees with splitReasoning for any cut of any output, inside or not', () => {
    const piece = fc.constantFrom('<think>', '</think>', '<th', '</', 'ink>', '\n', 'a', 'word ', '<', '>');
    const text = fc.array(piece, { maxLength: 10 }).map((p) => p.join(''));
    fc.assert(fc.property(text, fc.boolean(), fc.array(fc.nat(), { maxLength: 6 }), (t, inside, cuts) => {
      const s = new ReasoningStreamSplitter(inside);
      const parts = [...cut(t, cuts).map((p) => s.push(p)), s.finish()];
      const whole = splitReasoning(t, inside);
      assert.equal(parts.map((p) => p.reasoning).join(''), whole.reasoning ?? '');
      assert.equal(parts.map((p) => p.content).join(''), whole.content ?? '');
    }), { numRuns: 500 });
  });
});

describe('reasoning, then tool calls', () => {
  const o: ChatOutputOptions = { reasoning: true, startsInReasoning: false, tools: 'hermes' };
  const text = '<think>Need the weather.</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';

  it('parses calls in the content only, after the thinking', () => {
    assert.deepEqual(parseChatOutput(text, o), {
      reasoning: 'Need the weather.', content: '\n\n', calls: [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }],
    });
    const inThinking = '<think><tool_call>{"name": "f"}</tool_call></think>Done.';
    assert.deepEqual(parseChatOutput(inThinking, o), { reasoning: '<tool_call>{"name": "f"}</tool_call>', content: 'Done.', calls: [] });
  });

  it('streams the same for any cut', () => {
    fc.assert(fc.property(fc.array(fc.nat(), { maxLength: 8 }), (cuts) => {
      const s = new ChatOutputStream(o);
      const parts = [...cut(text, cuts).map((p) => s.push(p)), s.finish()];
      assert.equal(parts.map((p) => p.reasoning).join(''), 'Need the weather.');
      assert.equal(parts.map((p) => p.content).join(''), '\n\n');
      assert.deepEqual(parts.flatMap((p) => p.calls), [{ name: 'get_weather', arguments: '{"city":"Oslo"}' }]);
      assert.equal(s.callCount, 1);
    }), { numRuns: 200 });
  });
});

describe('--reasoning-parser through the server', () => {
  const TEMPLATE = '{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}'
    + '{% if add_generation_prompt %}<|assistant|>{% if open_think %}<think>\n{% endif %}{% endif %}';
  let script = '';
  let s: TestServer;
  let client: OpenAI;
  before(async () => {
    s = await startTestServer({ chatTemplate: TEMPLATE, reasoningParser: 'qwen3', enableAutoToolChoice: true, toolCallParser: 'hermes' },
      { script: () => script });
    client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => s.close());
  const messages = [{ role: 'user' as const, content: '2 + 2?' }];

  /** Content and reasoning_content of a streamed answer, joined. */
  async function streamedParts(extra: Record<string, unknown> = {}): Promise<{ reasoning: string; content: string }> {
    const stream = await client.chat.completions.create({ model: MODEL, messages, stream: true, ...extra });
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      reasoning += d?.reasoning_content ?? '';
      content += d?.content ?? '';
    }
    return { reasoning, content };
  }

  it('answers the thinking as reasoning_content and the rest as content, streamed or not', async () => {
    script = '<think>\nTwo and two.\n</think>\n\nFour.';
    const r = await client.chat.completions.create({ model: MODEL, messages });
    const m = r.choices[0]!.message as { content: string | null; reasoning_content?: string | null };
    assert.equal(m.reasoning_content, '\nTwo and two.\n');
    assert.equal(m.content, '\n\nFour.');
    assert.deepEqual(await streamedParts(), { reasoning: '\nTwo and two.\n', content: '\n\nFour.' });
  });

  it('reads up to </think> as reasoning when the template opened the block (chat_template_kwargs)', async () => {
    script = 'Two and two.</think>Four.';
    const extra = { chat_template_kwargs: { open_think: true } } as Record<string, unknown>;
    const r = await client.chat.completions.create({ model: MODEL, messages, ...extra });
    const m = r.choices[0]!.message as { content: string | null; reasoning_content?: string | null };
    assert.deepEqual([m.reasoning_content, m.content], ['Two and two.', 'Four.']);
    assert.deepEqual(await streamedParts(extra), { reasoning: 'Two and two.', content: 'Four.' });
    const closed = await client.chat.completions.create({ model: MODEL, messages });
    const c = closed.choices[0]!.message as { content: string | null; reasoning_content?: string | null };
    assert.deepEqual([c.reasoning_content, c.content], [null, 'Two and two.</think>Four.']);
  });

  it('parses tool calls after the thinking', async () => {
    script = '<think>Weather.</think><tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>';
    const tools = [{ type: 'function' as const, function: { name: 'get_weather' } }];
    const r = await client.chat.completions.create({ model: MODEL, messages, tools });
    const m = r.choices[0]!.message as { content: string | null; reasoning_content?: string | null; tool_calls?: { function: { name: string } }[] };
    assert.equal(m.reasoning_content, 'Weather.');
    assert.equal(m.content, null);
    assert.deepEqual(m.tool_calls!.map((c) => c.function.name), ['get_weather']);
    assert.equal(r.choices[0]!.finish_reason, 'tool_calls');
  });
});

describe('without --reasoning-parser', () => {
  it('leaves the thinking in content and sends no reasoning_content', async () => {
    const s = await startTestServer({}, { script: () => '<think>x</think>y' });
    try {
      const r = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'q' }] });
      assert.equal(r.json.choices[0].message.content, '<think>x</think>y');
      assert.equal('reasoning_content' in r.json.choices[0].message, false);
    } finally {
      await s.close();
    }
  });
});

describe('structured outputs after the thinking', () => {
  it('a grammar waits for the end-of-thinking token, then holds', () => {
    const log: string[] = [];
    const inner = { maskLogits: () => log.push('mask'), accept: (t: number) => (log.push(`accept ${t}`), true), failure: () => null, dispose: () => log.push('dispose') };
    const c = new ConstraintAfterToken(inner, 9);
    c.maskLogits(new Float32Array(4), 4);
    c.accept(5);
    c.accept(9);
    c.maskLogits(new Float32Array(4), 4);
    c.accept(7);
    c.dispose();
    assert.deepEqual(log, ['mask', 'accept 7', 'dispose']);
  });

  it('waits for </think> only where it is one token and the prompt leaves room to think', () => {
    const qwen = loadTokenizer(QWEN3_TOKENIZER_DIR);
    const end = qwen.encode('</think>', { addSpecialTokens: false });
    assert.equal(end.length, 1);
    assert.equal(reasoningEndToken(qwen, '<|im_start|>assistant\n'), end[0]);
    assert.equal(reasoningEndToken(qwen, '<|im_start|>assistant\n<think>\n\n</think>\n\n'), undefined);
    assert.equal(reasoningEndToken({ encode: () => [1, 2, 3] }, 'x'), undefined);
  });

  it('the chat route hands the engine the wait, unless the prompt closed the thinking or a tool call is forced', async () => {
    class ThinkTokenizer extends ByteTokenizer {
      override encode(text: string, opts?: { addSpecialTokens?: boolean }): number[] {
        return text === '</think>' ? [2] : super.encode(text, opts);
      }
    }
    const template = '{% for m in messages %}{{ m.content }}{% endfor %}{% if no_think %}<think></think>{% endif %}';
    const s = await startTestServer({ tokenizer: new ThinkTokenizer(), chatTemplate: template, reasoningParser: 'qwen3' });
    try {
      const ask = async (extra: Record<string, unknown>) => {
        const r = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'q' }], max_tokens: 2,
          response_format: { type: 'json_object' }, ...extra });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        return s.engine.submitted.at(-1)!.sampling.structuredOutput;
      };
      assert.deepEqual(await ask({}), { type: 'json', schema: '{"type": "object"}', afterTokenId: 2 });
      assert.deepEqual(await ask({ chat_template_kwargs: { no_think: true } }), { type: 'json', schema: '{"type": "object"}' });
      const tools = [{ type: 'function', function: { name: 'f' } }];
      const forced = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'q' }], max_tokens: 2, tools,
        tool_choice: { type: 'function', function: { name: 'f' } } });
      assert.equal(forced.status, 200);
      assert.equal(s.engine.submitted.at(-1)!.sampling.structuredOutput!.afterTokenId, undefined);
    } finally {
      await s.close();
    }
  });
});
