// Sampling flags for generate and chat (names as the OpenAI/vLLM fields).

import type { Command } from 'commander';
import { atLeast } from './option-parsers.js';
import type { RawSamplingParams } from '../sampling/validate.js';

export function addSamplingFlags(cmd: Command): Command {
  return cmd.optionsGroup('Sampling:')
    .option('--max-tokens <n>', 'new tokens at most', atLeast(1), 256)
    .option('--temperature <t>', 'sampling temperature (0 = greedy)')
    .option('--top-p <p>', 'nucleus sampling mass')
    .option('--top-k <k>', 'keep the k most likely tokens (-1 = all)')
    .option('--min-p <p>', 'drop tokens below p x the top probability')
    .option('--repetition-penalty <r>', 'penalty on prompt and generated tokens')
    .option('--presence-penalty <r>', 'penalty on tokens already generated')
    .option('--frequency-penalty <r>', 'penalty growing with each repetition')
    .option('--stop <s...>', 'stop strings')
    .option('--min-tokens <n>', 'no stop before this many tokens')
    .option('--ignore-eos', 'keep generating past EOS')
    .optionsGroup('Options:');
}

const num = (v: unknown): number | undefined => (v === undefined ? undefined : Number(v));

/** Flags -> raw params (validated later by validateSamplingParams, which names a bad one). */
export function samplingFromFlags(f: Record<string, unknown>, defaults: { temperature?: number; topP?: number }): RawSamplingParams {
  const raw: RawSamplingParams = {
    maxTokens: num(f.maxTokens),
    temperature: num(f.temperature) ?? defaults.temperature,
    topP: num(f.topP) ?? defaults.topP,
    topK: num(f.topK),
    minP: num(f.minP),
    repetitionPenalty: num(f.repetitionPenalty),
    presencePenalty: num(f.presencePenalty),
    frequencyPenalty: num(f.frequencyPenalty),
    stop: f.stop,
    minTokens: num(f.minTokens),
    ignoreEos: f.ignoreEos === true ? true : undefined,
  };
  for (const k of Object.keys(raw) as (keyof RawSamplingParams)[]) if (raw[k] === undefined) delete raw[k];
  return raw;
}
