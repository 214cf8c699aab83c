import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChatTemplateError, chatTemplateFromConfig, renderChat } from '../../src/loader/chat-template.js';
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
