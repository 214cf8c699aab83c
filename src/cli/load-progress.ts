// Model load progress for the commands that load a model in this process (generate, chat, bench, gate): a bar of
// bytes and tensors on a terminal, log lines otherwise, and one line when the model is loaded.

import { LLM } from '../engine/llm.js';
import { checkpointSize, setWeightsReadListener, weightsReadLogger } from '../loader/load-progress.js';
import { resolveModelPath } from '../loader/hub-cache.js';
import { startProgress } from '../lab/progress.js';

/**
 * Starts showing the progress of loading `model`'s weights (call before the model starts loading); the function it
 * returns ends it and prints how long the load took (nothing when `failed`).
 */
export function showLoadProgress(model: string, stream: NodeJS.WriteStream = process.stderr): (failed?: boolean) => void {
  const t0 = performance.now();
  let size: { numBytes: number; numTensors: number } | null = null;
  try {
    size = checkpointSize(resolveModelPath(model));
  } catch {
    size = null; // the load itself reports what is wrong with the directory
  }
  if (size === null) return () => {};
  const total = size;
  const names = new Set<string>();
  const mib = (n: number) => n / 2 ** 20;
  let numBytes = 0;
  if (stream.isTTY === true) {
    const bar = startProgress({ label: 'loading weights', total: mib(total.numBytes), unit: 'MiB', tty: true, stream,
      format: (n) => n.toFixed(0) });
    setWeightsReadListener((name, n) => {
      numBytes += n;
      names.add(name);
      bar.update(Math.min(mib(numBytes), mib(total.numBytes)), `${Math.min(names.size, total.numTensors)}/${total.numTensors} tensors`);
    });
    return (failed = false) => {
      setWeightsReadListener(null);
      bar.stop(!failed);
      if (!failed) stream.write(loadedLine(total, t0));
    };
  }
  setWeightsReadListener(weightsReadLogger(total, (line) => stream.write(`quire: ${line}\n`)));
  return (failed = false) => {
    setWeightsReadListener(null);
    if (!failed) stream.write(loadedLine(total, t0));
  };
}

function loadedLine(total: { numBytes: number; numTensors: number }, t0: number): string {
  return `quire: loaded ${total.numTensors} tensors (${(total.numBytes / 2 ** 30).toFixed(2)} GiB) in `
    + `${((performance.now() - t0) / 1000).toFixed(1)} s\n`;
}

/** A new LLM, loaded, with the load's progress shown. */
export async function loadLLM(model: string, options: ConstructorParameters<typeof LLM>[1]): Promise<LLM> {
  const done = showLoadProgress(model);
  const llm = new LLM(model, options);
  try {
    await llm.ready();
  } catch (e) {
    done(true);
    throw e;
  }
  done();
  return llm;
}
