// createEngineCore: loads the model directory, picks and sizes the backend, starts the other ranks of tensor and
// pipeline parallelism (tp/leader.ts), sizes the KV cache (over every stage under pipeline parallelism:
// tp/stage-kv.ts), and builds the engine core.

import { loadModel, type ModelDir } from '../loader/model-dir.js';
import { defaultMaxModelLen } from '../model/rope.js';
import { createBackend, sizeKvCache, startupRefusal } from './backend-factory.js';
import { EngineCore } from './engine-core.js';
import { maxModelLenRefusal } from './max-model-len.js';
import { resolveEngineOptions, type EngineOptions } from './options.js';
import { grammarVocabOf } from './request-grammars.js';
import { profileRun } from './runner/model-runner.js';
import { parseSpeculativeConfig } from './spec/config.js';
import { loadDraft } from './spec/draft-load.js';
import type { DraftProposer } from './spec/draft-proposer.js';
import { mtpRefusal } from './spec/mtp-load.js';
import { eagle3StartRefusal } from './spec/eagle3-load.js';
import { loadEngineModel } from './tp/leader.js';
import { pipelineKv } from './tp/stage-kv.js';

/** Loads the model directory, picks and sizes the backend, and builds the engine core. */
export async function createEngineCore(given: EngineOptions, loaded?: ModelDir): Promise<EngineCore> {
  const t0 = performance.now();
  // a bad --speculative-config fails before anything loads (resolveEngineOptions parses it again, to itself)
  if (given.speculativeConfig != null) parseSpeculativeConfig(given.speculativeConfig);
  const dir = loaded ?? await loadModel(given.model, given);
  const { backend, device } = await createBackend(given);
  const options = resolveEngineOptions(given, { backend: backend.name, name: device, totalBytes: backend.memory().totalBytes });
  const maxModelLen = options.maxModelLen ?? defaultMaxModelLen(dir.config);
  const cannot = startupRefusal(dir.config, backend, options, dir.weights) ??
    maxModelLenRefusal(dir.config, maxModelLen, options) ?? mtpRefusal(dir, options) ?? eagle3StartRefusal(dir, options);
  if (cannot) {
    backend.dispose();
    throw new Error(cannot);
  }
  // tensor and pipeline parallelism: rank 0's part here, the other ranks in threads or processes that run each step
  // as this one does
  const { model, tp } = await loadEngineModel(dir, backend, options).catch((err: unknown) => {
    backend.dispose();
    throw err;
  });
  let drafter: DraftProposer | null = null;
  try {
    tp?.profile(options, maxModelLen);
    profileRun(model, options, maxModelLen);
    const spec = options.speculativeConfig;
    if (spec?.method === 'draft_model') drafter = await loadDraft(spec, dir, backend, options, maxModelLen);
    // pipeline stages: every stage's budget and layers decide the pages and slots all of them hold
    const stages = tp && tp.ppSize > 1 ? await pipelineKv(tp, model, backend, options, drafter?.model ?? null) : null;
    const { numBlocks, numStateSlots, numCachedStateSlots, numSpecBackupSlots, bytesPerStateSlot } = sizeKvCache(model,
      backend, options, maxModelLen, drafter?.model ?? null, stages?.plan);
    // a hybrid model's running sequences are as many as its state slots (sizeKvCache may have lowered them)
    const engineOptions = numStateSlots > 0 && numStateSlots < options.maxNumSeqs ? { ...options, maxNumSeqs: numStateSlots } : options;
    tp?.sized(numBlocks, numStateSlots + numCachedStateSlots + numSpecBackupSlots, engineOptions);
    const core = new EngineCore({
      model, backend, numBlocks, numStateSlots, numCachedStateSlots, maxModelLen, eosTokenIds: dir.generation.eosTokenIds, tp, drafter,
      grammarVocab: grammarVocabOf(dir), kvGroups: stages?.groups,
      info: { backend: backend.name, device, loadMs: 0, weightBytesPerStep: stages?.weightBytesPerStep ?? model.weightBytesPerStep(),
        kvBytesPerToken: stages?.kvBytesPerToken ?? model.kvBytesPerToken(), bytesPerStateSlot },
    }, engineOptions);
    core.captureGraphs();
    drafter?.captureGraphs();
    core.info.loadMs = Math.round(performance.now() - t0);
    return core;
  } catch (err) {
    // the start-up error is what the caller must see, not one of freeing what it left half made
    for (const free of [() => drafter?.dispose(), () => tp?.shutdown(), () => backend.dispose()]) await Promise.resolve().then(free).catch(() => {});
    throw err;
  }
}
