// quire gate: the correctness gates (transcript md5 per path, reference KL
// against transformers or llama.cpp, GPU op tests), summarised as a gate-summary table;
// --dump-peer writes llama.cpp's reference dump.

import { spawnSync } from 'node:child_process';
import { basename, join } from 'node:path';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { Command } from 'commander';
import type { LLM } from '../engine/llm.js';
import { loadLLM } from './load-progress.js';
import {
  compareToReference, dumpPeerReference, formatGateSummary, formatMismatch, gatesPassed, loadGatePrompts, opsCheck,
  parseTestRunnerOutput, readReferenceFile, referenceCheck, runTranscriptGate, transcriptCheck, type GateCheck, type GateSummary,
  type Generator, type ReferenceDump, type ReferenceThresholds,
} from '../lab/index.js';
import { packageRoot } from './default-model.js';
import { addEngineFlags, engineOptionsFromFlags } from './engine-flags.js';
import type { KvCacheDtype } from '../loader/fp8.js';
import { loadModel } from '../loader/model-dir.js';
import type { Tokenizer } from '../loader/types.js';
import { bytesToUnicode } from '../tools/test-model/bpe.js';
import { atLeast } from './option-parsers.js';

/**
 * The recorded transcript a run is gated against: backend, dtype, weights quantized at load (`-fp8w`), an FP8 KV
 * cache (`-fp8kv`) and bf16 DeltaNet states (`-bf16ssm`: lossy paths of their own), and what changes the bits on CUDA.
 */
export function gatePathKey(backend: string, options: { enforceEager: boolean; batchInvariant: boolean;
  kvCacheDtype?: KvCacheDtype; quantization?: 'fp8' | null; mambaSsmCacheDtype?: 'f32' | 'bf16' },
  ggufFormat: string | null = null): string {
  // a GGUF file's quantization (q4_k_m, ...) is a path of its own: its transcripts and its KL band differ per format
  const lossy = `${ggufFormat !== null ? `-${ggufFormat}` : ''}${options.quantization === 'fp8' ? '-fp8w' : ''}`
    + `${options.kvCacheDtype === 'fp8_e4m3' ? '-fp8kv' : ''}`
    + `${options.mambaSsmCacheDtype === 'bf16' ? '-bf16ssm' : ''}`;
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

/**
 * Teacher-forced top-20 logprobs at each reference step, through the engine (prefix cache makes it cheap). The
 * reference is a tools/reference dump (full logits) or a peer's (`--dump-peer`: top-k lists; the KL then runs over
 * the peer's top-k and one bucket for the rest, compareToReference).
 */
export async function referenceGate(llm: LLM, ref: ReferenceInput, pathKey: string, thresholds: Record<string, ReferenceThresholds>): Promise<GateCheck> {
  const { reference, prefixes } = ref;
  const actual: ReferenceDump = { prompts: [] };
  for (const p of prefixes) {
    const steps = [];
    for (const prefix of p.steps) {
      const [c] = await llm.generate([prefix], { maxTokens: 1, temperature: 0, logprobs: 20, ignoreEos: true });
      steps.push({ top: c!.logprobs![0]!.top });
    }
    actual.prompts.push({ id: p.id, steps });
  }
  const r = compareToReference(actual, reference, thresholds, pathKey);
  for (const f of r.failures) console.error(`reference gate: ${f}`);
  return referenceCheck(r);
}

/**
 * The thresholds entry a reference is judged by: the path's, or `<path>-llamacpp` for a llama.cpp dump, whose own
 * arithmetic (activations quantized to 8 bits in its quantized dot products, its kernels' sums) puts it further
 * from Quire than transformers' f32 is.
 */
export function referenceThresholdsKey(ref: ReferenceInput, pathKey: string, ggufFormat: string | null = null): string {
  const base = pathKey.replace(/-graphs$/, '');
  // llama.cpp read the same quantized file: the format's own loss is on both sides, so one band for every format
  return ref.peerKind === 'llama.cpp' ? `${ggufFormat !== null ? base.replace(`-${ggufFormat}`, '') : base}-llamacpp` : base;
}

/** A reference dump file, read once (a transformers dump holds full logits: hundreds of MB for a real vocabulary). */
export type ReferenceInput = ReturnType<typeof readReferenceFile> & { peerKind: string | null };
export function loadReferenceFile(file: string): ReferenceInput {
  const obj = JSON.parse(readFileSync(file, 'utf8')) as { peer?: { kind?: string } };
  return { ...readReferenceFile(obj, file), peerKind: obj.peer?.kind ?? null };
}

/**
 * A token's bytes as llama-server prints it: a byte-level BPE vocabulary entry mapped back through GPT-2's byte map
 * (the only tokenizer a GGUF carries that Quire reads), an added token's text as UTF-8, a special one as nothing
 * (llama-server renders control tokens only when started with --special), and a padding id ("[PAD<id>]", type
 * UNUSED in the GGUF, as the converters name the rows a vocabulary is padded with) as nothing too.
 */
export function tokenPieces(tokenizer: Tokenizer): (id: number) => Uint8Array {
  const byteOf = new Map(bytesToUnicode().map((ch, b) => [ch, b]));
  return (id) => {
    const t = tokenizer.idToToken(id);
    if (t === undefined || tokenizer.specialTokenIds.has(id) || t === `[PAD${id}]`) return new Uint8Array(0);
    const chars = [...t];
    return chars.every((ch) => byteOf.has(ch)) ? Uint8Array.from(chars, (ch) => byteOf.get(ch)!) : new TextEncoder().encode(t);
  };
}

/** --dump-peer: the gate prompts through a llama-server, written as a reference dump; loads the tokenizer only. */
async function dumpPeer(f: Record<string, unknown>, model: string, tokenizer: string | null): Promise<void> {
  if (!f.out) throw new Error('--dump-peer needs --out <file>');
  const dir = await loadModel(model, { tokenizer, hfOverrides: (f.hfOverrides as Record<string, unknown> | undefined) ?? null });
  const prompts = loadGatePrompts(f.prompts as string);
  console.log(`quire gate --dump-peer: ${prompts.prompts.length} prompts of ${f.prompts as string}, tokenized by ${dir.tokenizerDir}, `
    + `${prompts.maxTokens} greedy tokens each from ${f.dumpPeer as string}`);
  const dump = await dumpPeerReference({
    url: f.dumpPeer as string, prompts, encode: (text) => dir.tokenizer.encode(text, { addSpecialTokens: true }),
    piece: tokenPieces(dir.tokenizer), nProbs: f.peerNProbs as number, log: (line) => console.log(line),
  });
  writeFileSync(f.out as string, JSON.stringify(dump));
  console.log(`wrote ${f.out as string}${dump.peer.props ? ` (peer ${JSON.stringify(dump.peer.props)})` : ''}`);
}

export function gateCommand(): Command {
  const cmd = new Command('gate')
    .description('correctness gates: greedy transcript md5 per path, KL against a transformers or llama.cpp reference, GPU op tests')
    .option('--prompts <file>', 'gate prompt set', join(packageRoot(), 'bench', 'gate-prompts.json'))
    .option('--canonical <file>', 'recorded transcripts (default: bench/gates/<model name>.json)')
    .option('--path-key <key>', 'path name (default: <backend>-<dtype>[-<GGUF file type>][-graphs])')
    .option('--record', 'record this path\'s transcript instead of checking it', false)
    .option('--reference <file>', 'a reference dump to compare logprobs against (tools/reference, or --dump-peer\'s)')
    .option('--thresholds <file>', 'reference thresholds per path', join(packageRoot(), 'bench', 'gates', 'thresholds.json'))
    .option('--reference-key <key>', 'thresholds entry for --reference (default: the path, plus -llamacpp for a llama.cpp dump)')
    .option('--dump-peer <url>', 'write a reference dump from a llama-server (POST /completion) instead of gating; needs --out')
    .option('--out <file>', 'where --dump-peer writes its dump')
    .option('--peer-n-probs <n>', 'top-k logprobs a step asked of the peer (n_probs)', atLeast(2), 20)
    .option('--ops', 'run the GPU op tests (npm run test:gpu) and count them', false)
    .option('--summary <file>', 'write the gate summary as JSON (read by quire bench serve --gates)')
    .option('--phase <p>', 'record the checks as "pre" or "post" in the summary file (post merges into an existing one)', 'pre');
  addEngineFlags(cmd);
  return cmd.action(async (f: Record<string, unknown>) => {
    const { model, ...options } = engineOptionsFromFlags(f);
    if (f.dumpPeer) return dumpPeer(f, model, options.tokenizer ?? null);
    const llm = await loadLLM(model, options);
    const checks: GateCheck[] = [];
    try {
      const dir = await llm.ready();
      const info = llm.engineInfo();
      const format = dir.ggufFileType ?? null;
      const pathKey = (f.pathKey as string | undefined) ?? gatePathKey(info.backend, options, format);
      const canonicalPath = (f.canonical as string | undefined) ?? join(packageRoot(), 'bench', 'gates', `${basename(model)}.json`);
      const ref = f.reference ? loadReferenceFile(f.reference as string) : null;
      const referenceKey = ref ? (f.referenceKey as string | undefined) ?? referenceThresholdsKey(ref, pathKey, format) : '';
      console.log(`quire gate: model ${dir.dir} (${dir.config.architecture}, ${dir.config.numLayers} layers), backend `
        + `${info.backend} (${info.device}), path ${pathKey}`);
      console.log(`  transcript: greedy tokens of ${f.prompts as string} against ${canonicalPath}`
        + (f.reference ? `\n  reference: top-20 logprobs against ${f.reference as string} (thresholds ${f.thresholds as string}, `
          + `entry ${referenceKey})` : ''));
      const t = await runTranscriptGate({
        generator: llmGenerator(llm), prompts: loadGatePrompts(f.prompts as string), pathKey, canonicalPath,
        mode: f.record ? 'record' : 'check',
      });
      for (const m of t.mismatches) console.error(formatMismatch(m));
      checks.push(transcriptCheck(t));
      if (ref) {
        const thresholds = JSON.parse(readFileSync(f.thresholds as string, 'utf8')) as Record<string, ReferenceThresholds>;
        checks.push(await referenceGate(llm, ref, referenceKey, thresholds));
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
