import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChatTemplateError, chatTemplateFromConfig, loadChatTemplateArg, renderChat } from '../../src/loader/chat-template.js';
import { parseChatRequest } from '../../src/api/schemas.js';
import { serverLimits } from '../../src/api/options.js';
import { promptOpensThinking } from '../../src/api/reasoning.js';
import { CHATML_TEMPLATE } from '../../src/tools/test-model/bpe.js';
import { QWEN3_TOKENIZER_DIR } from './helpers.js';

const qwenTemplate = JSON.parse(readFileSync(join(QWEN3_TOKENIZER_DIR, 'tokenizer_config.json'), 'utf8')).chat_template as string;
const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi there' },
];
const chatml = (ms: { role: string; content: string }[]) => ms.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('');

test('qwen3 template: ChatML turns, generation prompt, enable_thinking', () => {
  assert.equal(renderChat(qwenTemplate, messages), chatml(messages));
  assert.equal(renderChat(qwenTemplate, messages, { addGenerationPrompt: true }), chatml(messages) + '<|im_start|>assistant\n');
  assert.equal(
    renderChat(qwenTemplate, messages, { addGenerationPrompt: true, enable_thinking: false }),
    chatml(messages) + '<|im_start|>assistant\n<think>\n\n</think>\n\n',
  );
});

test('qwen3 template: earlier assistant turns lose their reasoning', () => {
  const turns = [
    { role: 'user', content: 'a' },
    { role: 'assistant', content: '<think>\nhmm\n</think>\n\nb' },
    { role: 'user', content: 'c' },
  ];
  assert.equal(renderChat(qwenTemplate, turns), chatml([turns[0]!, { role: 'assistant', content: 'b' }, turns[2]!]));
});

test('generated ChatML template renders the same turns as Qwen3', () => {
  for (const addGenerationPrompt of [false, true]) {
    assert.equal(renderChat(CHATML_TEMPLATE, messages, { addGenerationPrompt }), renderChat(qwenTemplate, messages, { addGenerationPrompt }));
  }
});

test('bos/eos tokens and extra variables reach the template', () => {
  const t = '{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}{{ suffix }}';
  assert.equal(renderChat(t, messages, { bosToken: '<s>', eosToken: '</s>', suffix: '!' }), '<s>You are terse.Hi there</s>!');
  assert.equal(renderChat(t, messages), 'You are terse.Hi there');
});

test('template errors are ChatTemplateError: parse failures and raise_exception', () => {
  assert.throws(() => renderChat('{% for m in messages %}', messages), ChatTemplateError);
  const strict = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}";
  assert.throws(() => renderChat(strict, messages), (e: unknown) => e instanceof ChatTemplateError && /first message must be from the user/.test(e.message));
});

test('chat_template in tokenizer_config: a string or a named list', () => {
  assert.equal(chatTemplateFromConfig('x'), 'x');
  assert.equal(chatTemplateFromConfig([{ name: 'tool_use', template: 't' }, { name: 'default', template: 'd' }]), 'd');
  assert.equal(chatTemplateFromConfig([{ name: 'rag', template: 'r' }]), 'r');
  assert.equal(chatTemplateFromConfig(undefined), null);
});

test('--chat-template: a file, the template itself, or a clear error (missing file, template that does not parse)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quire-tpl-'));
  try {
    const file = join(dir, 'tpl.jinja');
    writeFileSync(file, '{% for m in messages %}[{{ m.content }}]{% endfor %}');
    assert.equal(renderChat(loadChatTemplateArg(file), [{ role: 'user', content: 'a' }]), '[a]');
    assert.equal(renderChat(loadChatTemplateArg('{{ messages[0].role }}'), [{ role: 'user', content: 'a' }]), 'user');
    assert.throws(() => loadChatTemplateArg(join(dir, 'missing.jinja')), /missing\.jinja: looks like a file path, but there is no such file/);
    const broken = join(dir, 'broken.jinja');
    writeFileSync(broken, '{% for m in messages %}');
    assert.throws(() => loadChatTemplateArg(broken), (e: Error) => e instanceof ChatTemplateError && e.message.startsWith(`--chat-template ${broken}: chat template does not parse`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('qwen3 template with tools: the tool list, an earlier call (arguments sent as a JSON string) and its answer', () => {
  const r = parseChatRequest({
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
    messages: [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: '-3 C' },
    ],
  }, serverLimits());
  const text = renderChat(qwenTemplate, r.messages, { tools: r.tools, addGenerationPrompt: true });
  assert.ok(text.startsWith('<|im_start|>system\n# Tools\n'), text);
  assert.ok(text.includes('<tools>\n{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}\n</tools>'), text);
  assert.ok(text.endsWith('<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n'
    + '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
    + '<|im_start|>user\n<tool_response>\n-3 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n'), text);
  assert.equal(promptOpensThinking(text), false);
  assert.equal(promptOpensThinking(renderChat(qwenTemplate, r.messages, { addGenerationPrompt: true, enable_thinking: false })), false);
});
