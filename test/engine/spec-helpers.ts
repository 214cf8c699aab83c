// What the speculative-decoding engine tests (spec-decode, spec-draft) run: prompts through the LLM class on the CPU
// backend, greedy unless told, with the transcripts (as comma-joined ids), texts, finish reasons, logprobs and stats.

import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import type { EngineStats } from '../../src/engine/types.js';

export interface Run { tokenIds: string[]; texts: string[]; finish: string[]; stats: EngineStats; logprobs: unknown[] }

export async function generate(model: string, opts: Partial<EngineOptions>, prompts: (string | number[])[],
  params: Record<string, unknown>): Promise<Run> {
  const llm = new LLM(model, { backend: 'cpu', cpuThreads: 1, ...opts });
  try {
    const out = await llm.generate(prompts, { temperature: 0, ...params });
    return { tokenIds: out.map((c) => c.tokenIds.join(',')), texts: out.map((c) => c.text), finish: out.map((c) => c.finishReason),
      stats: await llm.stats(), logprobs: out.map((c) => c.logprobs) };
  } finally {
    await llm.close();
  }
}
