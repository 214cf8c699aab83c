// The device work of one step as plain data (DeviceStep), and the one function that performs it. The model runner
// decides each step's DeviceStep and runs it here. Under tensor parallelism the runner hands the same DeviceStep to
// every other rank first (RunnerOptions.mirror; parallel/tp-leader.ts), and each runs it on its shard: every rank
// then launches the same kernels and collectives in the same order, and captures and replays its graphs under the
// same keys, because what a step launches is a function of its DeviceStep alone.

import type { DeviceGraphs } from '../../backend/backend.js';
import type { ForwardBatch } from '../../backend/batch.js';
import type { Model } from '../../model/model.js';

export type DeviceStep =
  /** Logits to the host (the host Sampler picks), through the graph under graphKey where one is given. */
  | { op: 'logits'; batch: ForwardBatch; graphKey: number | null }
  /** Tokens sampled on the device: the graph under graphKey launched (captured first if need be), else eager. */
  | { op: 'tokens'; batch: ForwardBatch; graphKey: number | null }
  /** Prompt logprobs where the logits are (Model.forwardScored), and the sampled rows' logits. */
  | { op: 'scored'; batch: ForwardBatch; numSampled: number; targets: Int32Array; numTop: number }
  /** A hybrid model's recurrent state copied between slots (prefix-cache restore and save). */
  | { op: 'copyState'; src: number; dst: number };

export type DeviceResult =
  | { op: 'logits'; logits: Float32Array }
  | { op: 'tokens'; wait: () => Int32Array }
  | { op: 'scored'; logits: Float32Array; scored: Int32Array }
  | { op: 'copyState' };

/** Performs `step` on `model` (graphs: the backend's, or undefined where steps run eagerly). */
export function runDeviceStep(model: Model, graphs: DeviceGraphs | undefined, step: DeviceStep): DeviceResult {
  switch (step.op) {
    case 'copyState':
      model.copyRecurrentState(step.src, step.dst);
      return { op: 'copyState' };
    case 'scored':
      return { op: 'scored', ...model.forwardScored(step.batch, step.numSampled, step.targets, step.numTop) };
    case 'logits': {
      const { batch, graphKey } = step;
      const logits = graphs && graphKey !== null ? graphs.run(graphKey, batch, () => model.forward(batch)) : model.forward(batch);
      return { op: 'logits', logits };
    }
    case 'tokens': {
      const { batch, graphKey } = step;
      if (!graphs || graphKey === null) return { op: 'tokens', wait: model.forwardTokensAsync(batch) };
      const waitTokens = graphs.launch(graphKey, batch);
      if (waitTokens) return { op: 'tokens', wait: () => waitTokens() as Int32Array };
      const tokenIds = graphs.run(graphKey, batch, () => model.forwardTokens(batch));
      return { op: 'tokens', wait: () => tokenIds };
    }
  }
}
