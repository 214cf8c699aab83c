// quire bench serve | offline | decode

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { LLM } from '../engine/llm.js';
import { loadLLM } from './load-progress.js';
import { acquireBenchLock, benchDecode, collectProvenance, decodeRooflineStepsPerS, describeGpuProcesses, gpuPreflight,
  meanMeasuredContext } from '../lab/index.js';
import { loadModelConfig } from '../loader/config.js';
import { resolveModelPath } from '../loader/hub-cache.js';
import type { ModelDir } from '../loader/model-dir.js';
import {
  buildPrefill, buildW4, buildW5 as buildOfflineW5, llmBatchRunner, loadW1, offlinePromptsFile, prefillFlops, randomTokens, runOffline,
  type OfflineResult,
} from '../lab/offline.js';
import { offlineSummary, type OfflineRun, specDecodingLine } from '../lab/offline-summary.js';
import { startProgress } from '../lab/progress.js';
import { parseJsonlPrompts } from '../lab/workloads.js';
import { OFFLINE_RESULT_SCHEMA_PATH, schemaErrors, type JsonSchema } from '../lab/result-schema.js';
import { packageRoot } from './default-model.js';
import { addEngineFlags, engineOptionsFromFlags } from './engine-flags.js';
import { benchServeCommand } from './bench-serve.js';
import { atLeast, int, num } from './option-parsers.js';

// Parsers of option values (option-parsers.ts): commander's error names the flag and the value.
const ints = (v: string) => v.split(',').map((x) => {
  const n = Number(x);
  if (x.trim() === '' || !Number.isInteger(n) || n <= 0) {
    throw new InvalidArgumentError('expected a comma-separated list of positive integers.');
  }
  return n;
});
const count = atLeast(1);

/** Every benchmark takes the GPU lock and runs the preflight; these flags override. */
function addLockFlags(cmd: Command): Command {
  return cmd
    .option('--force', 'run even when other processes use the GPU or the lock is held', false)
    .option('--lock-dir <dir>', 'where the benchmark lock lives');
}

/** `serversOnGpu`: bench serve, whose targets are usually servers on this GPU: their processes are listed, not refused. */
function withLock<T>(flags: Record<string, unknown>, run: () => Promise<T>, serversOnGpu = false): Promise<T> {
  const pre = gpuPreflight({ force: flags.force === true, expectOthers: serversOnGpu });
  if (serversOnGpu && pre.others.length > 0) {
    console.error(`GPU processes (the servers under test, or else load that skews the figures): ${describeGpuProcesses(pre.others)}`);
  }
  const lock = acquireBenchLock({ force: flags.force === true, ...(flags.lockDir ? { dir: flags.lockDir as string } : {}) });
  return run().finally(() => lock.release());
}

/** A result with its extra figures, checked against bench/offline-result.schema.json (the peer script's shape). */
function checkedOffline(r: OfflineResult, extra: Record<string, unknown> = {}): OfflineRun {
  const text = JSON.stringify({ ...r, ...extra }, null, 2);
  const schema = JSON.parse(readFileSync(join(packageRoot(), OFFLINE_RESULT_SCHEMA_PATH), 'utf8')) as JsonSchema;
  const errors = schemaErrors(JSON.parse(text), schema);
  if (errors.length > 0) throw new Error(`the result does not match ${OFFLINE_RESULT_SCHEMA_PATH}: ${errors.join('; ')}`);
  return { ...r, ...extra };
}

function offlineCommand(): Command {
  const cmd = new Command('offline')
    .description('in-process throughput (no HTTP): w1 offline-256, w4 memory pressure, w5 shared prefix (cache on vs off)')
    .addOption(new Option('--workload <w>', 'workload (prefill: --num-requests prompts of --prompt-len tokens, 1 output token)')
      .choices(['w1', 'w4', 'w5', 'prefill']).default('w1'))
    .option('--num-requests <n>', 'requests (w1: first n of 256; w4: 512; w5: 64)', count)
    .option('--prompt-len <n>', 'w4 prompt tokens (2048)', count, 2048)
    .option('--output-len <n>', 'output tokens (w1: per request from the file, w4: 256, w5: 64)', count)
    .option('--prefix-len <n>', 'w5 shared system prompt tokens', atLeast(0), 2000)
    .option('--suffix-len <n>', 'w5 suffix tokens', atLeast(0), 100)
    .option('--concurrency <n>', 'w5 concurrency', count, 16)
    .option('--json <file>', 'the raw results as JSON, with provenance, to this file (- : to stdout, after the table)')
    .option('--dump-prompts <file>', 'w1: write the prompt token ids this run would use (for tools/reference/peer_generate_batch.py) and exit');
  addLockFlags(addEngineFlags(cmd));
  return cmd.action(async (f: Record<string, unknown>, self: Command) => {
    const { model, ...options } = engineOptionsFromFlags(f);
    const w1 = (vocabSize: number) => loadW1(join(packageRoot(), 'bench', 'offline-256.json'), vocabSize,
      f.numRequests as number | undefined, f.outputLen as number | undefined);
    if (f.dumpPrompts) {
      if (f.workload !== 'w1') self.error('quire bench offline: --dump-prompts is only for --workload w1');
      const { vocabSize } = loadModelConfig(join(resolveModelPath(model), 'config.json'), options.hfOverrides);
      mkdirSync(join(f.dumpPrompts as string, '..'), { recursive: true });
      writeFileSync(f.dumpPrompts as string, JSON.stringify(offlinePromptsFile('w1', vocabSize, w1(vocabSize))) + '\n');
      console.log(`wrote ${f.dumpPrompts as string}`);
      return;
    }
    await withLock(f, async () => {
      const results: OfflineRun[] = [];
      const run = async (name: string, opts: typeof options, build: (vocab: number) => Parameters<typeof runOffline>[2],
        concurrency?: number, warmup = false, before?: (llm: LLM, dir: ModelDir) => Promise<void>) => {
        const llm = await loadLLM(model, opts);
        try {
          const dir = await llm.ready();
          const reqs = build(dir.config.vocabSize);
          // warm-up prompts of the same lengths but other tokens: the timed run gets no prefix-cache hit from them
          if (warmup) {
            await runOffline(llm, 'warmup', reqs.slice(0, 4).map((r, i) => ({
              promptTokenIds: randomTokens(r.promptTokenIds.length, dir.config.vocabSize, 424242 + i), maxTokens: 4 })));
          }
          await before?.(llm, dir);
          const bar = startProgress({ label: name, total: reqs.length, unit: 'requests' });
          try {
            return await runOffline(llm, name, reqs, { ...(concurrency === undefined ? {} : { concurrency }),
              onRequestDone: () => bar.increment() });
          } finally {
            bar.stop();
          }
        } finally {
          await llm.close();
        }
      };
      if (f.workload === 'w1') {
        let bandwidth: number | null = null;
        let bytesBefore = 0;
        const r = await run('w1', options, w1, undefined, true, async (llm) => {
          bandwidth = await llm.copyBandwidth();
          bytesBefore = (await llm.stats()).minBytesRead;
        });
        const extra: Record<string, unknown> = {};
        if (bandwidth !== null) {
          extra.bandwidthFloorS = (r.stats.minBytesRead - bytesBefore) / bandwidth;
          extra.shareOfBandwidthFloor = (extra.bandwidthFloorS as number) / r.wallS;
        }
        results.push(checkedOffline(r, extra));
      } else if (f.workload === 'prefill') {
        const n = (f.numRequests as number | undefined) ?? 32;
        const promptLen = f.promptLen as number;
        let flops = 0;
        let peak: number | null = null;
        const r = await run('prefill', options, (v) => buildPrefill(n, promptLen, v), undefined, true, async (llm, dir) => {
          flops = prefillFlops(dir.config, Array(n).fill(promptLen));
          peak = await llm.gemmPeak();
        });
        const extra: Record<string, unknown> = { promptTokensPerS: r.numPromptTokens / r.wallS, modelTflopPerS: flops / r.wallS / 1e12 };
        if (peak !== null) {
          extra.gemmPeakTflopPerS = peak / 1e12;
          extra.shareOfGemmPeak = flops / r.wallS / peak;
        }
        results.push(checkedOffline(r, extra));
      } else if (f.workload === 'w4') {
        const promptLen = f.promptLen as number;
        const outputLen = (f.outputLen as number | undefined) ?? 256;
        const r = await run('w4', options, (v) => buildW4((f.numRequests as number | undefined) ?? 512, promptLen, outputLen, v));
        const kvTokens = (r.stats.numTotalBlocks - 1) * options.blockSize;
        const maxModelLen = options.maxModelLen ?? (promptLen + outputLen);
        const reservedSeqs = Math.floor(kvTokens / maxModelLen);
        const extra = {
          kvCacheTokens: kvTokens, maxSeqsRunningAtOnce: r.stats.numRunningPeak, preemptions: r.stats.numPreemptions,
          reservedFullContextSeqs: reservedSeqs, ratioVsReserved: r.stats.numRunningPeak / Math.max(1, reservedSeqs),
        };
        results.push(checkedOffline(r, extra));
      } else {
        const outputLen = (f.outputLen as number | undefined) ?? 64;
        const build = (v: number) => buildOfflineW5((f.numRequests as number | undefined) ?? 64, f.prefixLen as number, f.suffixLen as number, outputLen, v);
        for (const enablePrefixCaching of [true, false]) {
          const r = await run(`w5 prefix cache ${enablePrefixCaching ? 'on' : 'off'}`, { ...options, enablePrefixCaching }, build, f.concurrency as number);
          const extra = { promptTokensSent: r.numPromptTokens, promptTokensComputed: r.stats.numPromptTokens, prefixCacheHits: r.stats.prefixCacheHits };
          results.push(checkedOffline(r, extra));
        }
      }
      console.log(offlineSummary(results));
      if (f.json) {
        const provenance = await collectProvenance({ config: { command: 'bench offline', ...f } });
        const text = JSON.stringify({ provenance, results }, null, 2);
        if (f.json === '-') {
          console.log(text);
        } else {
          mkdirSync(join(f.json as string, '..'), { recursive: true });
          writeFileSync(f.json as string, text);
          console.log(`results: ${f.json as string}`);
        }
      }
    });
  });
}

function decodeCommand(): Command {
  const cmd = new Command('decode')
    .description('W2 decode rate by the difference method, in-process, at several batch sizes (and context lengths)')
    .option('--batch-sizes <list>', 'batch sizes', ints, [1])
    .option('--prompt-len <n>', 'prompt tokens', count, 128)
    .option('--context-lens <list>', 'prompt tokens, one run each (replaces --prompt-len), e.g. 128,1024,4096,16384', ints)
    .option('--prompt-file <jsonl>', 'text prompts ({"prompt": ...} a line), one a row in turn, each cut to its first '
      + '--prompt-len tokens (in place of random token ids: speculative decoding\'s acceptance needs real text)')
    .option('--g1 <n>', 'short generation', count, 64)
    .option('--g2 <n>', 'long generation', count, 320)
    .option('--repeats <n>', 'measured repeats', count, 2)
    .option('--temperature <t>', 'sampling temperature (0: greedy)', num, 0)
    .option('--top-p <p>', 'nucleus sampling mass', num)
    .option('--top-k <k>', 'sample among the k most likely tokens', int);
  addLockFlags(addEngineFlags(cmd));
  return cmd.action(async (f: Record<string, unknown>) => {
    const { model, ...options } = engineOptionsFromFlags(f);
    const contextLens = (f.contextLens as number[] | undefined) ?? null;
    const file = f.promptFile as string | undefined;
    if (file !== undefined && contextLens) throw new Error('quire bench decode: --prompt-file and --context-lens exclude each other');
    const fromFile = file === undefined ? undefined : parseJsonlPrompts(readFileSync(file, 'utf8'), `--prompt-file ${file}`);
    if (fromFile?.length === 0) throw new Error(`quire bench decode: --prompt-file ${file}: no prompts`);
    await withLock(f, async () => {
      const llm = await loadLLM(model, options);
      try {
        const dir = await llm.ready();
        const bandwidth = await llm.copyBandwidth();
        const info = llm.engineInfo();
        const bytes = { weightBytes: info.weightBytesPerStep, kvBytesPerToken: info.kvBytesPerToken,
          stateBytesPerSeq: info.bytesPerStateSlot };
        if (bandwidth !== null) {
          console.log(`copy bandwidth ${(bandwidth / 1e12).toFixed(2)} TB/s, ${(info.weightBytesPerStep / 2 ** 30)
            .toFixed(2)} GiB of weights per step: roofline ${(bandwidth / info.weightBytesPerStep).toFixed(0)} steps/s `
            + `(less with each row's K/V: ${(info.kvBytesPerToken / 1024).toFixed(1)} KiB a token of context)`);
        }
        const prompts = fromFile?.map((p) => (typeof p.prompt === 'string' ? dir.tokenizer.encode(p.prompt) : p.prompt)
          .slice(0, f.promptLen as number));
        for (const promptTokens of contextLens ?? [f.promptLen as number]) {
          for (const batchSize of f.batchSizes as number[]) {
            const before = await llm.stats();
            const r = await benchDecode({
              targets: [{ name: 'quire', run: llmBatchRunner(llm, { temperature: f.temperature as number,
                ...(f.topP !== undefined ? { topP: f.topP as number } : {}), ...(f.topK !== undefined ? { topK: f.topK as number } : {}) }) }],
              batchSize, promptTokens, g1: f.g1 as number, g2: f.g2 as number, numRepeats: f.repeats as number,
              vocabSize: dir.config.vocabSize, ...(prompts ? { prompts } : {}),
            });
            const t = r.targets[0]!;
            const after = await llm.stats();
            const hostMs = after.hostMs - before.hostMs;
            const hostShare = hostMs / (hostMs + after.executeMs - before.executeMs);
            const context = meanMeasuredContext(r.promptTokens, r.g1, r.g2);
            const roofline = bandwidth === null ? ''
              : `, ${(100 * t.perSeqTokensPerS / decodeRooflineStepsPerS(bandwidth, bytes, batchSize, context)).toFixed(1)}% `
                + 'of the per-sequence roofline of weights, K/V and state '
                + `(${(100 * t.perSeqTokensPerS * info.weightBytesPerStep / bandwidth).toFixed(1)}% of the weights-only one)`;
            const spec = specDecodingLine(after.specDecoding, before.specDecoding);
            console.log(`${contextLens ? `context ${promptTokens}, ` : ''}batch ${batchSize}: ${t.medianTokensPerS.toFixed(1)} tokens/s `
              + `(${t.perSeqTokensPerS.toFixed(1)} per sequence${roofline}; engine host time ${(100 * hostShare).toFixed(1)}% of step time)`
              + (spec === null ? '' : `; ${spec}`));
          }
        }
      } finally {
        await llm.close();
      }
    });
  });
}

export function benchCommand(): Command {
  return new Command('bench')
    .description('the parity lab\'s benchmarks')
    .addCommand(benchServeCommand(addLockFlags, withLock))
    .addCommand(offlineCommand())
    .addCommand(decodeCommand());
}
