// CPU sampler cost per step at Qwen3's vocabulary width, one line per mode.
//   node dist/src/sampling/bench-sampler.js [numRows] [numSteps]

import { defaultSamplingParams, type SamplingParams } from './params.js';
import { Rng } from '../backend/sampling/rng.js';
import { Sampler } from './sampler.js';

const VOCAB = 151936;
const numRows = Number(process.argv[2] ?? 32);
const numSteps = Number(process.argv[3] ?? 5);

const MODES: Record<string, Partial<SamplingParams>> = {
  greedy: { temperature: 0 },
  temperature: { temperature: 0.8 },
  topK50: { temperature: 0.8, topK: 50 },
  topP09: { temperature: 0.8, topP: 0.9 },
  topK50TopP09: { topK: 50, topP: 0.9 },
  minP005: { minP: 0.05 },
  greedyLogprobs5: { temperature: 0, logprobs: 5 },
  penalties: { repetitionPenalty: 1.1, frequencyPenalty: 0.5, presencePenalty: 0.5 },
};

// Logits ~ N(0, 3^2): a wide, flat-ish row, harder than a real model's.
const rng = new Rng(1);
const logits = new Float32Array(numRows * VOCAB);
for (let i = 0; i < logits.length; i++) {
  logits[i] = 3 * Math.sqrt(-2 * Math.log(1 - rng.nextFloat())) * Math.cos(2 * Math.PI * rng.nextFloat());
}
const prompt = Array.from({ length: 2000 }, (_, i) => (i * 7919) % VOCAB);
const sampler = new Sampler({ vocabSize: VOCAB, eosTokenIds: [151645], seed: 1 });
for (const [name, p] of Object.entries(MODES)) {
  const states = Array.from({ length: numRows }, () => sampler.newSequenceState(defaultSamplingParams(p), prompt));
  for (const s of states) s.appendOutputTokens(prompt.slice(0, 500));
  sampler.sample(logits, states);
  const t0 = performance.now();
  for (let i = 0; i < numSteps; i++) sampler.sample(logits, states);
  const stepMs = (performance.now() - t0) / numSteps;
  console.log(`${name.padEnd(16)} ${stepMs.toFixed(1).padStart(7)} ms/step  ${(stepMs / numRows).toFixed(3)} ms/row  (${numRows} rows x ${VOCAB})`);
}
