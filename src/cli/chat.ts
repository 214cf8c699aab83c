// quire chat: an interactive conversation in the terminal, through the model's chat template (the loop is in
// chat-session.ts).

import { basename } from 'node:path';
import { Command } from 'commander';
import type { LLM } from '../engine/llm.js';
import { loadLLM } from './load-progress.js';
import { runChat, type ChatModel } from './chat-session.js';
import { addModelFlags, engineOptionsFromFlags } from './engine-flags.js';
import { addSamplingFlags, samplingFromFlags } from './sampling-flags.js';

export function chatCommand(): Command {
  const cmd = new Command('chat')
    .description('chat with a model in the terminal (history kept and trimmed to the context; /help lists the '
      + 'commands, Ctrl-C stops an answer, Ctrl-D or /exit leaves)')
    .option('--system <text>', 'a system message');
  addSamplingFlags(addModelFlags(cmd));
  return cmd.action(async (flags: Record<string, unknown>) => {
    const { model, ...options } = engineOptionsFromFlags(flags);
    process.stderr.write(`quire chat: loading ${model} ...\n`);
    const llm = await loadLLM(model, options);
    try {
      const chatModel = await llmChatModel(llm, flags);
      await runChat(chatModel, {
        input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY === true, signals: process,
      }, { system: (flags.system as string | undefined) ?? null, maxTokens: Number(flags.maxTokens) });
    } finally {
      await llm.close().catch(() => {});
    }
  });
}

/** The loaded LLM as the chat sees it: name, backend, context, template, tokens and a text stream. */
export async function llmChatModel(llm: LLM, flags: Record<string, unknown>): Promise<ChatModel> {
  const dir = await llm.ready();
  const info = llm.engineInfo();
  const params = samplingFromFlags(flags, { temperature: dir.generation.temperature, topP: dir.generation.topP });
  return {
    name: basename(dir.dir),
    backend: `${info.backend} (${info.device})`,
    maxModelLen: info.maxModelLen,
    render: (messages) => llm.renderChat(messages),
    countTokens: (prompt) => dir.tokenizer.encode(prompt).length,
    async *stream(prompt, maxTokens) {
      for await (const d of llm.stream(prompt, { ...params, maxTokens })) yield d.text;
    },
  };
}
