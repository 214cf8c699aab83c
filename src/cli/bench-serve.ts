// quire bench serve: the workload from the flags (each flag honoured by the workload it applies to, or refused
// naming it), a probe of each target (its tokens per word, so text prompts are as long as asked, and its speed),
// the run's estimated length before it starts, then the interleaved rounds and the report.

import { readFileSync } from 'node:fs';
import { Command, InvalidArgumentError, Option } from 'commander';
import {
  benchServe, buildCustomWorkload, buildW3, buildW5, collectProvenance, writeReport, type BenchTarget, type GateSummary,
  type Workload,
} from '../lab/index.js';
import { estimateWork, formatDuration, probeTarget, wordsForTokens, type TargetSpeed } from '../lab/probe.js';
import { scrapeSpecCounters } from '../lab/spec-scrape.js';
import type { Length } from '../lab/workloads.js';
import { atLeast, positive } from './option-parsers.js';

const ints = (v: string) => v.split(',').map((x) => {
  const n = Number(x);
  if (x.trim() === '' || !Number.isInteger(n) || n <= 0) {
    throw new InvalidArgumentError('expected a comma-separated list of positive integers.');
  }
  return n;
});
const length = (v: string) => {
  const parts = v.split(':').map(Number);
  if (parts.length > 2 || !parts.every((n) => Number.isInteger(n) && n > 0) || (parts.length === 2 && parts[0]! > parts[1]!)) {
    throw new InvalidArgumentError('expected a positive integer n, or min:max.');
  }
  const [a, b] = parts;
  return b === undefined ? a! : { min: a!, max: b };
};
const collect = (v: string, prev: string[] = []) => [...prev, v];
const collectKeyValues = (v: string, prev: string[] = []) => {
  if (v.indexOf('=') <= 0) throw new InvalidArgumentError('expected name=value.');
  return [...prev, v];
};
const count = atLeast(1);

export function keyValue(v: string): [string, string] {
  const i = v.indexOf('=');
  return [v.slice(0, i), v.slice(i + 1)];
}

/** A run estimated longer than this is announced with a warning and a shorter command line. */
const LONG_RUN_S = 600;

/** Which workload takes which flag; any other given is refused with the reason. */
const FLAGS_OF: Record<string, readonly string[]> = {
  w3: ['concurrency', 'promptLen', 'outputLen'],
  w5: ['concurrency', 'numRequests', 'outputLen'],
  custom: ['concurrency', 'numRequests', 'promptLen', 'outputLen', 'jsonl', 'requestRate', 'burstiness', 'ignoreEos'],
};
const FLAG_NAMES: Record<string, string> = {
  concurrency: '--concurrency', numRequests: '--num-requests', promptLen: '--prompt-len', outputLen: '--output-len',
  jsonl: '--jsonl', requestRate: '--request-rate', burstiness: '--burstiness', ignoreEos: '--no-ignore-eos',
};

/** The first flag given that the workload does not take, or takes in another form, as an error message; null if none. */
export function workloadFlagError(f: Record<string, unknown>): string | null {
  const w = f.workload as string;
  for (const key of Object.keys(FLAG_NAMES)) {
    const given = key === 'ignoreEos' ? f.ignoreEos === false : f[key] !== undefined;
    if (given && !FLAGS_OF[w]!.includes(key)) {
      return `${FLAG_NAMES[key]} does not apply to --workload ${w} (it takes ${FLAGS_OF[w]!.map((k) => FLAG_NAMES[k]).join(', ')})`;
    }
  }
  if (w === 'w3') {
    for (const key of ['promptLen', 'outputLen']) {
      if (typeof f[key] === 'object') return `${FLAG_NAMES[key]}: --workload w3 takes one length, not a min:max range (use --workload custom)`;
    }
  }
  if (w === 'w5') {
    if (((f.concurrency as number[] | undefined)?.length ?? 0) > 1) return '--concurrency: --workload w5 runs one level: give one concurrency';
    if (typeof f.outputLen === 'object') return '--output-len: --workload w5 takes one length, not a min:max range';
  }
  if (w === 'custom' && f.concurrency === undefined && f.requestRate === undefined) {
    return '--workload custom needs --concurrency, --request-rate, or both';
  }
  return null;
}

/** The workload the flags ask for; text prompt lengths in tokens turned into words by `words`. */
export function workloadFromFlags(f: Record<string, unknown>, words: (numTokens: number) => number = (n) => n): Workload {
  const common = { promptFormat: f.promptFormat as 'text' | 'ids', vocabSize: f.vocabSize as number, nonce: f.nonce as boolean };
  const text = common.promptFormat === 'text';
  const toWords = (len: Length): Length => !text ? len
    : typeof len === 'number' ? words(len) : { min: words(len.min), max: Math.max(words(len.min), words(len.max)) };
  if (f.workload === 'w5') {
    const w5 = buildW5({ ...common, systemPromptTokens: text ? words(2000) : 2000, suffixTokens: text ? words(100) : 100,
      ...(f.numRequests ? { numRequests: f.numRequests as number } : {}),
      ...(f.concurrency ? { concurrency: (f.concurrency as number[])[0]! } : {}),
      ...(typeof f.outputLen === 'number' ? { outputTokens: f.outputLen } : {}) });
    w5.description = w5.description.replace(/system \d+ \+ suffix \d+/, 'system 2000 + suffix 100 tokens');
    return w5;
  }
  if (f.workload === 'custom') {
    return buildCustomWorkload({
      ...common, numRequests: (f.numRequests as number | undefined) ?? 64, outputTokens: (f.outputLen ?? 128) as Length,
      promptTokens: toWords((f.promptLen as Length | undefined) ?? 256),
      ...(f.jsonl ? { jsonlPath: f.jsonl as string } : {}),
      ...(f.concurrency ? { concurrency: f.concurrency as number[] } : {}),
      ...(f.requestRate ? { requestRatePerS: f.requestRate as number } : {}),
      ...(f.burstiness !== undefined ? { burstiness: f.burstiness as number } : {}),
      ignoreEos: f.ignoreEos as boolean,
    });
  }
  const promptTokens = (f.promptLen as number | undefined) ?? 1024;
  const w3 = buildW3({
    ...common, ...(f.concurrency ? { concurrencies: f.concurrency as number[] } : {}),
    promptTokens: toWords(promptTokens) as number,
    ...(typeof f.outputLen === 'number' ? { outputTokens: f.outputLen } : {}),
  });
  w3.description = w3.description.replace(/prompt \d+/, `prompt ${promptTokens}`);
  return w3;
}

/** Text prompts' token counts as the probed server counts their words. */
function countTokensOfWords(workload: Workload, speed: TargetSpeed): void {
  if (workload.promptFormat !== 'text' || speed.tokensPerWord === null) return;
  for (const level of workload.levels) {
    for (const r of level.requests) {
      if (typeof r.prompt === 'string') r.approxPromptTokens = Math.round(r.prompt.split(' ').length * speed.tokensPerWord + speed.offsetTokens);
    }
  }
}

/** The lines announcing a run's work and length; a warning with a shorter command line when it is long. */
export function estimateLines(workload: Workload, numRounds: number, speeds: readonly TargetSpeed[]): string[] {
  const e = estimateWork(workload, numRounds, speeds);
  const lines = [`bench serve: ${workload.name} (${workload.description}): ${e.numRequests} requests over ${numRounds} `
    + `round(s) and ${speeds.length} target(s), ${e.numPromptTokens} prompt and ${e.numOutputTokens} output tokens; `
    + `estimated ${formatDuration(e.minS)} to ${formatDuration(e.maxS)} at the speeds probed `
    + `(${speeds.map((s) => `${s.target}: ${s.prefillTokensPerS.toFixed(0)} prompt, ${s.decodeTokensPerS.toFixed(1)} output tokens/s a sequence`).join('; ')})`];
  if (e.minS > LONG_RUN_S) {
    lines.push(`warning: this run will take at least ${formatDuration(e.minS)} on these servers. For a first look, try a `
      + 'small one: --workload custom --num-requests 16 --concurrency 1,4 --prompt-len 128 --output-len 32 --rounds 1 (Ctrl-C stops it)');
  }
  return lines;
}

export function benchServeCommand(addLockFlags: (cmd: Command) => Command,
  withLock: <T>(flags: Record<string, unknown>, run: () => Promise<T>, serversOnGpu?: boolean) => Promise<T>): Command {
  return addLockFlags(new Command('serve'))
    .description('load-test one or more OpenAI-compatible servers side by side, in interleaved rounds')
    .requiredOption('--target <name=url>', 'a server to measure (repeat for several)', collectKeyValues)
    .option('--model <model>', 'model name to request: one for all, or name=model per target (repeat)', collect)
    .addOption(new Option('--workload <w>', 'w3: prompt 1024, output 128, concurrency 1/8/32/128/256 (hours on a CPU); '
      + 'w5: shared 2000-token prefix; custom: as the flags say').choices(['w3', 'w5', 'custom']).default('w3'))
    .option('--concurrency <list>', 'concurrency levels, e.g. 1,4 (w3, custom; w5: one)', ints)
    .option('--num-requests <n>', 'requests per level (custom: 64, w5: 64)', count)
    .option('--prompt-len <n|min:max>', 'prompt tokens (w3: 1024; custom: 256, or a range)', length)
    .option('--output-len <n|min:max>', 'output tokens (w3: 128, w5: 64; custom: 128, or a range)', length)
    .option('--jsonl <file>', 'custom: prompts from a JSONL file ({"prompt": ..., "max_tokens": ...})')
    .option('--request-rate <r>', 'custom: Poisson arrivals per second', positive)
    .option('--burstiness <b>', 'custom, with --request-rate: gamma-shaped arrivals (1 Poisson, lower burstier)', positive)
    .option('--no-nonce', 'no fresh random nonce at the start of each prompt')
    .option('--no-ignore-eos', 'custom: let generation stop at EOS')
    .addOption(new Option('--prompt-format <f>', 'send text (lengths measured with the server\'s tokenizer) or token ids')
      .choices(['text', 'ids']).default('text'))
    .option('--vocab-size <n>', 'vocabulary for token-id prompts', count, 32000)
    .option('--rounds <n>', 'interleaved rounds per level', count, 2)
    .option('--warmup <n>', 'warm-up requests per target', atLeast(0), 4)
    .option('--gates <file>', 'a gate-summary JSON (from quire gate --summary) to include in the report')
    .option('--out <dir>', 'report directory', 'bench-results')
    .option('--title <t>', 'report title')
    .action(async (f: Record<string, unknown>, cmd: Command) => {
      const models = (f.model as string[] | undefined) ?? [];
      const modelFor = new Map(models.filter((m) => m.includes('=')).map((m) => keyValue(m)));
      const defaultModel = models.find((m) => !m.includes('='));
      const targets: BenchTarget[] = (f.target as string[]).map((t) => {
        const [name, url] = keyValue(t);
        const model = modelFor.get(name) ?? defaultModel;
        if (!model) cmd.error(`quire bench serve: --model: no model name for target "${name}"`);
        return { name, url, model };
      });
      const flagError = workloadFlagError(f);
      if (flagError) cmd.error(`quire bench serve: ${flagError}`);
      const gates = f.gates ? JSON.parse(readFileSync(f.gates as string, 'utf8')) as GateSummary : null;
      await withLock(f, async () => {
        const speeds: TargetSpeed[] = [];
        for (const t of targets) speeds.push(await probeTarget(t));
        const workload = workloadFromFlags(f, (n) => wordsForTokens(n, speeds[0]!));
        countTokensOfWords(workload, speeds[0]!);
        for (const line of estimateLines(workload, f.rounds as number, speeds)) console.error(line);
        const bench = await benchServe({ targets, workload, numRounds: f.rounds as number, numWarmupRequests: f.warmup as number,
          vocabSize: f.vocabSize as number, scrapeSpec: (t) => scrapeSpecCounters(t.url) });
        const provenance = await collectProvenance({ config: { command: 'bench serve', ...f, targets } });
        const written = await writeReport({ bench, provenance, gates, ...(f.title ? { title: f.title as string } : {}) }, f.out as string);
        console.log(readFileSync(written.markdownPath, 'utf8'));
        console.log(`report: ${written.htmlPath}`);
      }, true);
    });
}
