// Progress of reading a checkpoint's weights: the safetensors reader reports every read to one listener per thread
// (setWeightsReadListener), and whoever shows progress (the CLI's bar, the server's log lines) sets it.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { openSafetensors, openShardedSafetensors, setWeightsReadListener } from './safetensors.js';

export type WeightsReadListener = (name: string, numBytes: number) => void;

export { setWeightsReadListener };

/** The bytes and tensors of a model directory's safetensors checkpoint (headers only); null when there is none. */
export function checkpointSize(dir: string): { numBytes: number; numTensors: number } | null {
  const index = join(dir, 'model.safetensors.index.json');
  const single = join(dir, 'model.safetensors');
  const source = existsSync(index) ? openShardedSafetensors(index) : existsSync(single) ? openSafetensors(single) : null;
  if (source === null) return null;
  let numBytes = 0;
  for (const name of source.names()) {
    const e = source.entry(name);
    numBytes += e.end - e.begin;
  }
  return { numBytes, numTensors: source.names().length };
}

/**
 * A listener that calls `log` with a progress line every `everyMs` while weights are read (for logs, where a bar
 * cannot redraw): "loading weights: 1.2 / 2.4 GiB, 150 / 311 tensors, 5 s".
 */
export function weightsReadLogger(total: { numBytes: number; numTensors: number }, log: (line: string) => void,
  everyMs = 5000, now: () => number = () => performance.now()): WeightsReadListener {
  const t0 = now();
  let last = t0;
  let numBytes = 0;
  const names = new Set<string>();
  return (name, n) => {
    numBytes += n;
    names.add(name);
    if (now() - last < everyMs) return;
    last = now();
    log(`loading weights: ${gib(Math.min(numBytes, total.numBytes))} / ${gib(total.numBytes)} GiB, `
      + `${Math.min(names.size, total.numTensors)} / ${total.numTensors} tensors, ${((now() - t0) / 1000).toFixed(0)} s`);
  };
}

function gib(n: number): string {
  return (n / 2 ** 30).toFixed(n < 2 ** 30 ? 3 : 1);
}
