// What --speculative-config '{"method": "eagle3", "model": DIR, ...}' needs before anything loads: an EAGLE-3 head's
// directory that reads (loader/eagle3-head.ts), fits the target (model/architectures/eagle3-weights.ts: its hidden
// size, vocabulary, KV shape, the target layers it names, every tensor) and one device (no tensor or pipeline
// parallelism: the head reads three of the target's layers and embeds with its table, all on one rank). Refused
// naming the field, file or tensor at fault, never by a step that fails later.

import { loadEagle3HeadDir, type Eagle3HeadDir } from '../../loader/eagle3-head.js';
import type { ModelDir } from '../../loader/model-dir.js';
import { eagle3Refusal } from '../../model/architectures/eagle3-weights.js';
import type { ResolvedEngineOptions } from '../options.js';

type Options = Pick<ResolvedEngineOptions, 'speculativeConfig' | 'tensorParallelSize' | 'pipelineParallelSize'>;

/** Why the engine's --speculative-config (its eagle3 method; null for any other) cannot run on this target, or null. */
export function eagle3StartRefusal(dir: Pick<ModelDir, 'config'>, options: Options): string | null {
  const spec = options.speculativeConfig;
  if (spec?.method !== 'eagle3') return null;
  const why = (() => {
    if (options.tensorParallelSize > 1) return `the head runs on one device; --tensor-parallel-size is ${options.tensorParallelSize}`;
    if (options.pipelineParallelSize > 1) {
      return `the head runs on one device; --pipeline-parallel-size is ${options.pipelineParallelSize} (pipeline parallelism ` +
        'and EAGLE-3 speculative decoding do not combine)';
    }
    let head: Eagle3HeadDir;
    try {
      head = loadEagle3HeadDir(spec.model);
    } catch (err) {
      return `model ${spec.model}: ${(err as Error).message}`;
    }
    const unfit = eagle3Refusal(head, dir.config);
    return unfit === null ? null : `model ${head.dir}: ${unfit}`;
  })();
  return why === null ? null : `--speculative-config: method "eagle3": ${why}`;
}

/** The head's directory the model loads with (LoadOptions.eagle3), or null where the method is another. */
export function eagle3HeadOf(spec: ResolvedEngineOptions['speculativeConfig'] | undefined): Eagle3HeadDir | null {
  return spec?.method === 'eagle3' ? loadEagle3HeadDir(spec.model) : null;
}
