// Worker-thread entry: owns the EngineCore and runs its step loop. Between
// steps it yields to the event loop so that new requests and aborts land.

import { parentPort, workerData } from 'node:worker_threads';
import { createEngineCore } from './create-engine.js';
import type { FromWorker, ToWorker, WorkerInit } from './worker-protocol.js';
import { checkpointSize, setWeightsReadListener, weightsReadLogger } from '../loader/load-progress.js';

/** The server's log shows a long weight load going (a line every 5 s). */
function logWeightsReads(dir: string): void {
  try {
    const size = checkpointSize(dir);
    if (size) setWeightsReadListener(weightsReadLogger(size, (line) => process.stderr.write(`quire: ${line}\n`)));
  } catch {
    // the load reports what is wrong with the directory
  }
}

process.removeAllListeners('warning');
process.on('warning', (w) => process.stderr.write(`quire: warning: ${w.message}\n`));
const port = parentPort!;
const { options } = workerData as WorkerInit;
const send = (m: FromWorker): void => port.postMessage(m);
/** Gauges (running, waiting, KV usage) reach the API at least this often while anything is in flight. */
const STATS_INTERVAL_MS = 250;

try {
  logWeightsReads(options.model);
  const core = await createEngineCore(options);
  setWeightsReadListener(null);
  let stopping = false;
  let looping = false;
  let lastStatsMs = 0;
  let lastRunning = -1;
  let lastWaiting = -1;
  /** Notes what the gauges last showed, and returns the stats to send. */
  const sent = (stats: ReturnType<typeof core.stats>): ReturnType<typeof core.stats> => {
    lastStatsMs = Date.now();
    lastRunning = stats.numRunning;
    lastWaiting = stats.numWaiting;
    return stats;
  };
  const publishStats = (): void => send({ type: 'stats', stats: sent(core.stats()) });
  // a step that emits nothing (a prefill chunk) still changes what is running and waiting
  const timer = setInterval(() => {
    if (Date.now() - lastStatsMs >= STATS_INTERVAL_MS) publishStats();
  }, STATS_INTERVAL_MS);

  const loop = (): void => {
    if (stopping) return;
    if (!core.hasWork()) {
      looping = false;
      return;
    }
    try {
      const outputs = core.advance();
      const stats = core.stats();
      if (outputs.length > 0) {
        send({ type: 'outputs', outputs, stats: sent(stats) });
      } else if (stats.numRunning !== lastRunning || stats.numWaiting !== lastWaiting
        || Date.now() - lastStatsMs >= STATS_INTERVAL_MS) {
        // a step that admitted, preempted or finished a request moves the gauges at once
        send({ type: 'stats', stats: sent(stats) });
      }
    } catch (e) {
      // the API answers with the message alone; the stack goes to the log, for a bug report
      process.stderr.write(`quire: engine step failed (a bug; the stack for the report follows)\n${(e as Error).stack ?? e}\n`);
      send({ type: 'failed', message: `engine step failed: ${(e as Error).message ?? e}` });
      stopping = true;
      return;
    }
    setImmediate(loop);
  };
  const kick = (): void => {
    if (!looping && !stopping) {
      looping = true;
      setImmediate(loop);
    }
  };
  core.onWork = kick;

  port.on('message', (m: ToWorker) => {
    switch (m.type) {
      case 'add':
        core.addRequest(m.req);
        publishStats();
        kick();
        break;
      case 'abort': {
        const outputs = core.abortRequest(m.requestId);
        if (outputs.length > 0) send({ type: 'outputs', outputs, stats: core.stats() });
        else publishStats();
        break;
      }
      case 'probe':
        try {
          send({ type: 'probe', what: m.what, value: m.what === 'copyBandwidth' ? core.copyBandwidth() : core.gemmPeak() });
        } catch (e) {
          // a figure for a report: its failure is logged, and the engine serves on
          process.stderr.write(`quire: measuring ${m.what} failed: ${(e as Error).message}\n`);
          send({ type: 'probe', what: m.what, value: null });
        }
        break;
      case 'shutdown': {
        clearInterval(timer);
        stopping = true;
        // 'closed' once the other ranks have exited, so the client's shutdown leaves no process behind
        const traceSummary = core.traceSummary();
        void core.close().catch(() => {}).then(() => {
          send({ type: 'closed', traceSummary });
          port.close();
        });
        break;
      }
    }
  });
  send({ type: 'ready', info: core.info, stats: core.stats() });
} catch (e) {
  send({ type: 'failed', message: (e as Error).message });
}
