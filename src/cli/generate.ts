// quire generate: one prompt, text streamed to the terminal.

import { Command } from 'commander';
import type { LLM } from '../engine/llm.js';
import { loadLLM } from './load-progress.js';
import { addModelFlags, engineOptionsFromFlags } from './engine-flags.js';
import { addSamplingFlags, samplingFromFlags } from './sampling-flags.js';

function openLLM(flags: Record<string, unknown>): Promise<LLM> {
  const { model, ...options } = engineOptionsFromFlags(flags);
  return loadLLM(model, options);
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
  addSamplingFlags(addModelFlags(cmd));
  return cmd.action(async (flags: Record<string, unknown>) => {
    const llm = await openLLM(flags);
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
