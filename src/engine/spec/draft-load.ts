// Loads a draft model (--speculative-config '{"method": "draft_model", "model": DIR, ...}') beside the target: its
// directory, a check that it speaks the target's vocabulary, a backend of its own on the target's device, and a
// profile run that sizes its activations for the engine's step budget. Its KV cache is allocated later, with the
// target's page count (draft-proposer.ts says why the pages are shared), out of the target's KV budget, and its
// graphs are captured after that (DraftProposer.captureGraphs).

import type { Backend } from '../../backend/backend.js';
import { loadModel, type ModelDir } from '../../loader/model-dir.js';
import { Model } from '../../model/model.js';
import { backendRefusal, createBackend } from '../backend-factory.js';
import type { ResolvedEngineOptions } from '../options.js';
import { profileRun } from '../runner/model-runner.js';
import type { DraftModelConfig } from './config.js';
import { DraftProposer } from './draft-proposer.js';

/** Thrown when the draft cannot serve this target; the message names the field. */
export class DraftModelError extends Error {}

/**
 * Why `draft` cannot propose for `target`, or null: proposals are token ids, so both must have one vocabulary (the
 * same size and the same token at every id) and the draft must be a model the engine can roll back (no recurrent
 * state: a rejected proposal's KV is simply overwritten, a DeltaNet state would need restoring).
 */
export function draftRefusal(target: ModelDir, draft: ModelDir): string | null {
  if (draft.config.vocabSize !== target.config.vocabSize) {
    return `vocab_size: the draft's is ${draft.config.vocabSize}, the target's ${target.config.vocabSize} (a draft needs the target's tokenizer)`;
  }
  const [a, b] = [target.tokenizer, draft.tokenizer];
  if (a.vocabSize !== b.vocabSize) return `tokenizer: the draft's has ${b.vocabSize} tokens, the target's ${a.vocabSize}`;
  for (let id = 0; id < a.vocabSize; id++) {
    if (a.idToToken(id) !== b.idToToken(id)) {
      return `tokenizer: token ${id} is ${JSON.stringify(b.idToToken(id))} in the draft's, ${JSON.stringify(a.idToToken(id))} in the target's`;
    }
  }
  if (draft.config.hybrid !== null) return `model: a hybrid (${draft.config.architecture}) draft's recurrent state cannot be rolled back yet`;
  return null;
}

/** The draft, loaded and profiled on a backend of its own (DraftProposer.dispose frees it when the engine ends). */
export async function loadDraft(config: DraftModelConfig, target: ModelDir, targetBackend: Backend,
  options: ResolvedEngineOptions, maxModelLen: number): Promise<DraftProposer> {
  const draft = await loadModel(config.model);
  const refusal = draftRefusal(target, draft) ?? backendRefusal(draft.config, targetBackend.name);
  if (refusal) throw new DraftModelError(`--speculative-config: draft model ${draft.dir}: ${refusal}`);
  // the draft runs where the target runs (rank 0's device under tensor parallelism)
  const { backend } = await createBackend({ ...options, backend: targetBackend.name, profile: false });
  try {
    const model = Model.load(draft.config, draft.weights, backend, {});
    profileRun(model, options, maxModelLen);
    return new DraftProposer(model, options.blockSize, draft.config.maxPositionEmbeddings, options.maxNumBatchedTokens,
      { maxNumSeqs: options.maxNumSeqs, enforceEager: options.enforceEager });
  } catch (err) {
    backend.dispose();
    throw err;
  }
}
