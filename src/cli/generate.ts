// quire generate: one prompt, text streamed to the terminal.
// quire chat: an interactive conversation with history, through the chat template.

import { createInterface } from 'node:readline/promises';
import { Command } from 'commander';
import { LLM } from '../engine/llm.js';
import type { ChatMessage } from '../loader/types.js';
import { addEngineFlags, engineOptionsFromFlags } from './engine-flags.js';
import { addSamplingFlags, samplingFromFlags } from './sampling-flags.js';

function openLLM(flags: Record<string, unknown>): LLM {
  const { model, ...options } = engineOptionsFromFlags(flags);
  return new LLM(model, options);
}

async function streamTo(llm: LLM, prompt: string, flags: Record<string, unknown>): Promise<string> {
  const dir = await llm.ready();
  const params = samplingFromFlags(flags, { temperature: dir.generation.temperature, topP: dir.generation.topP });
  let text = '';
  for await (const d of llm.stream(prompt, params)) {
    process.stdout.write(d.text);
    text += d.text;
  }
  return text;
}

export function generateCommand(): Command {
  const cmd = new Command('generate')
    .description('generate text for one prompt, streamed to the terminal')
    .requiredOption('--prompt <text>', 'the prompt')
    .option('--chat', 'wrap the prompt as a user turn in the model\'s chat template', false);
  addSamplingFlags(addEngineFlags(cmd));
  return cmd.action(async (flags: Record<string, unknown>) => {
    const llm = openLLM(flags);
    try {
      const prompt = flags.chat
        ? await llm.renderChat([{ role: 'user', content: flags.prompt as string }])
        : flags.prompt as string;
      await streamTo(llm, prompt, flags);
      process.stdout.write('\n');
    } finally {
      await llm.close();
    }
  });
}

export function chatCommand(): Command {
  const cmd = new Command('chat')
    .description('chat with a model in the terminal (history kept; /reset clears it, /exit or Ctrl-D leaves)')
    .option('--system <text>', 'a system message');
  addSamplingFlags(addEngineFlags(cmd));
  return cmd.action(async (flags: Record<string, unknown>) => {
    const llm = openLLM(flags);
    const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY });
    const start: ChatMessage[] = flags.system ? [{ role: 'system', content: flags.system as string }] : [];
    let history = [...start];
    try {
      await llm.ready();
      for (;;) {
        let line: string;
        try {
          line = (await rl.question('> ')).trim();
        } catch {
          break; // input closed
        }
        if (line === '/exit') break;
        if (line === '/reset') {
          history = [...start];
          continue;
        }
        if (line === '') continue;
        history.push({ role: 'user', content: line });
        const reply = await streamTo(llm, await llm.renderChat(history), flags);
        process.stdout.write('\n');
        history.push({ role: 'assistant', content: reply.trim() });
      }
    } finally {
      rl.close();
      await llm.close();
    }
  });
}
