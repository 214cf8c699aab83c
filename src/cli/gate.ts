// quire gate: the correctness gates (transcript md5 per path, reference KL
// against transformers, GPU op tests), summarised as a gate-summary table.

import { spawnSync } from 'node:child_process';
import { basename, join } from 'node:path';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { Command } from 'commander';
import type { LLM } from '../engine/llm.js';
import { loadLLM } from './load-progress.js';
import {
  compareToReference, formatGateSummary, formatMismatch, gatesPassed, loadGatePrompts, opsCheck, parseTestRunnerOutput,
  referenceCheck, runTranscriptGate, transcriptCheck, type GateCheck, type GateSummary, type Generator, type ReferenceDump,
  type ReferenceThresholds,
} from '../lab/index.js';
import { packageRoot } from './default-model.js';
import { addEngineFlags, engineOptionsFromFlags } from './engine-flags.js';
import type { KvCacheDtype } from '../loader/fp8.js';

/**
 * The recorded transcript a run is gated against: backend, dtype, weights quantized at load (`-fp8w`) and an FP8 KV
 * cache (`-fp8kv`: lossy paths of their own), and what changes the bits on CUDA.
 */
export function gatePathKey(backend: string, options: { enforceEager: boolean; batchInvariant: boolean;
  kvCacheDtype?: KvCacheDtype; quantization?: 'fp8' | null }): string {
  const lossy = `${options.quantization === 'fp8' ? '-fp8w' : ''}${options.kvCacheDtype === 'fp8_e4m3' ? '-fp8kv' : ''}`;
  if (backend !== 'cuda') return `${backend}-f32${lossy}`;
  return `cuda-bf16${lossy}${options.enforceEager ? '' : '-graphs'}${options.batchInvariant ? '-batch-invariant' : ''}`;
}

/** Greedy generations through the in-process engine. */
export function llmGenerator(llm: LLM): Generator {
  return {
    async generate(prompts, maxTokens) {
      const out = await llm.generate(prompts, { maxTokens, temperature: 0, ignoreEos: true, skipSpecialTokens: false });
      return out.map((c) => ({ tokenIds: c.tokenIds, text: c.text }));
    },
  };
}

interface ToolsReferenceDump {
  prompts: { prompt: number[]; greedy: number[]; steps: { position: number; logits: number[] }[] }[];
}

/** Teacher-forced top-20 logprobs at each reference step, through the engine (prefix cache makes it cheap). */
async function referenceGate(llm: LLM, file: string, pathKey: string, thresholds: Record<string, ReferenceThresholds>): Promise<GateCheck> {
  const ref = JSON.parse(readFileSync(file, 'utf8')) as ToolsReferenceDump;
  const reference: ReferenceDump = { prompts: [] };
  const actual: ReferenceDump = { prompts: [] };
  for (const [i, p] of ref.prompts.entries()) {
    const id = `p${i}`;
    reference.prompts.push({ id, steps: p.steps.map((s) => ({ logits: s.logits })) });
    const steps = [];
    for (let k = 0; k < p.steps.length; k++) {
      const [c] = await llm.generate([[...p.prompt, ...p.greedy.slice(0, k)]], { maxTokens: 1, temperature: 0, logprobs: 20, ignoreEos: true });
      steps.push({ top: c!.logprobs![0]!.top });
    }
    actual.prompts.push({ id, steps });
  }
  const r = compareToReference(actual, reference, thresholds, pathKey);
  for (const f of r.failures) console.error(`reference gate: ${f}`);
  return referenceCheck(r);
}

export function gateCommand(): Command {
  const cmd = new Command('gate')
    .description('correctness gates: greedy transcript md5 per path, KL against a transformers reference, GPU op tests')
    .option('--prompts <file>', 'gate prompt set', join(packageRoot(), 'bench', 'gate-prompts.json'))
    .option('--canonical <file>', 'recorded transcripts (default: bench/gates/<model name>.json)')
    .option('--path-key <key>', 'path name (default: <backend>-<dtype>[-graphs])')
    .option('--record', 'record this path\'s transcript instead of checking it', false)
    .option('--reference <file>', 'a tools/reference dump to compare logprobs against')
    .option('--thresholds <file>', 'reference thresholds per path', join(packageRoot(), 'bench', 'gates', 'thresholds.json'))
    .option('--ops', 'run the GPU op tests (npm run test:gpu) and count them', false)
    .option('--summary <file>', 'write the gate summary as JSON (read by quire bench serve --gates)')
    .option('--phase <p>', 'record the checks as "pre" or "post" in the summary file (post merges into an existing one)', 'pre');
  addEngineFlags(cmd);
  return cmd.action(async (f: Record<string, unknown>) => {
    const { model, ...options } = engineOptionsFromFlags(f);
    const llm = await loadLLM(model, options);
    const checks: GateCheck[] = [];
    try {
      const dir = await llm.ready();
      const info = llm.engineInfo();
      const pathKey = (f.pathKey as string | undefined) ?? gatePathKey(info.backend, options);
      const canonicalPath = (f.canonical as string | undefined) ?? join(packageRoot(), 'bench', 'gates', `${basename(model)}.json`);
      console.log(`quire gate: model ${dir.dir} (${dir.config.architecture}, ${dir.config.numLayers} layers), backend `
        + `${info.backend} (${info.device}), path ${pathKey}`);
      console.log(`  transcript: greedy tokens of ${f.prompts as string} against ${canonicalPath}`
        + (f.reference ? `\n  reference: top-20 logprobs against ${f.reference as string} (thresholds ${f.thresholds as string})` : ''));
      const t = await runTranscriptGate({
        generator: llmGenerator(llm), prompts: loadGatePrompts(f.prompts as string), pathKey, canonicalPath,
        mode: f.record ? 'record' : 'check',
      });
      for (const m of t.mismatches) console.error(formatMismatch(m));
      checks.push(transcriptCheck(t));
      if (f.reference) {
        const thresholds = JSON.parse(readFileSync(f.thresholds as string, 'utf8')) as Record<string, ReferenceThresholds>;
        checks.push(await referenceGate(llm, f.reference as string, pathKey.replace(/-graphs$/, ''), thresholds));
      }
    } finally {
      await llm.close();
    }
    if (f.ops) {
      const r = spawnSync(process.execPath, [join(packageRoot(), 'scripts', 'run-tests.mjs'), '--gpu'], { cwd: packageRoot(), encoding: 'utf8' });
      checks.push(opsCheck('ops cuda', parseTestRunnerOutput(`${r.stdout}\n${r.stderr}`)));
    }
    const summaryFile = f.summary as string | undefined;
    const summary: GateSummary = summaryFile && f.phase === 'post' && existsSync(summaryFile)
      ? { ...(JSON.parse(readFileSync(summaryFile, 'utf8')) as GateSummary), post: checks }
      : { pre: checks, post: [] };
    if (summaryFile) writeFileSync(summaryFile, JSON.stringify(summary, null, 2));
    console.log(formatGateSummary(summary));
    if (!gatesPassed(summary)) process.exitCode = 1;
  });
}
