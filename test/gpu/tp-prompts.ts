// What the tensor-parallel GPU tests generate (tensor-parallel.test.ts, multi-node.test.ts and its node 0): the demo
// model's greedy transcripts of four prompts, 48 tokens each (or another model's, given its directory).

import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';
import { defaultModelDir } from '../../src/loader/default-model.js';

export const PROMPTS = [
  'And God said, Let there be light: and there was light.',
  'In the beginning God created the heaven and the earth. And the earth was without form',
  'The LORD is my shepherd; I shall not want.',
  'And he said unto them, Go ye into all the world.',
];

export async function transcripts(o: Partial<EngineOptions>, modelDir = defaultModelDir()): Promise<number[][]> {
  const llm = new LLM(modelDir, { backend: 'cuda', maxModelLen: 512, ...o });
  try {
    const out = await llm.generate(PROMPTS, { maxTokens: 48, temperature: 0, ignoreEos: true });
    return out.map((c) => c.tokenIds);
  } finally {
    await llm.close();
  }
}
