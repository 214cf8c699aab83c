// The watchdog of rank 0's child-process ranks: a worker thread that ends the whole engine when a rank dies while
// rank 0's thread cannot notice.
//
// Rank 0 learns of a dead rank from its child's 'exit' event, which its event loop delivers. But a step waits for
// its sampled tokens in a blocking cuEventSynchronize, and a collective whose peer is gone never completes: NCCL's
// kernels and the one-shot peer all-reduce (which spins on the peer's flags) wait forever, so the event never comes
// and the server hangs (issue 42: "a worker that dies ends the server with a clear error, never a hang"). Only an
// end of the processes frees those GPUs, as vLLM's engine monitor does. So this thread, whose loop runs while rank 0's
// is blocked, polls the ranks' processes; when one has died and rank 0 has not taken the failure in within the grace
// time (handled(): its loop turned), it says which rank died, kills the other ranks and then this process. A child
// rank watches rank 0's process the same way (follower-main.ts): rank 0 killed, its ranks end too.

import { existsSync, readFileSync, writeSync } from 'node:fs';
import { Worker } from 'node:worker_threads';

export interface WatchedRank {
  pid: number;
  /** How the message names it ("rank 1 (tp 1, pp 0)"). */
  label: string;
}

export interface RankWatchdog {
  /** Rank 0 took a rank's failure in (its loop runs): the watchdog stands down. */
  handled(): void;
  /** The ranks are being ended on purpose (shutdown, a failed start-up). */
  stop(): void;
}

/** Whether a process is alive: not gone and not a zombie (a child rank 0's blocked loop has not reaped). */
export function processAlive(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    if (existsSync('/proc/self/stat')) return false;
    // no /proc (not Linux): signal 0, which a zombie still answers, so only a reaped process reads as dead
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
  // the state is the field after the parenthesised command name (which may itself hold spaces and parentheses)
  const state = stat.charAt(stat.lastIndexOf(')') + 2);
  return state !== 'Z' && state !== 'X';
}

const STOPPED = 0;
const HANDLED = 1;

/** Starts the watchdog thread (unreferenced: it keeps no process alive). */
export function watchRanks(ranks: WatchedRank[], o: { pollMs?: number; graceMs?: number } = {}): RankWatchdog {
  const flags = new Int32Array(new SharedArrayBuffer(8));
  const worker = new Worker(new URL('./rank-watchdog-worker.js', import.meta.url),
    // none of this process's node flags (a --input-type or a test runner's would not apply to the watchdog's file)
    { workerData: { ranks, flags, pollMs: o.pollMs ?? 200, graceMs: o.graceMs ?? 3000 }, execArgv: [] });
  worker.unref();
  return {
    handled: () => { Atomics.store(flags, HANDLED, 1); },
    stop: () => {
      Atomics.store(flags, STOPPED, 1);
      void worker.terminate();
    },
  };
}

/** The worker's loop (rank-watchdog-worker.ts). */
export function runWatchdog(ranks: WatchedRank[], flags: Int32Array, pollMs: number, graceMs: number): void {
  let dead: { rank: WatchedRank; at: number } | null = null;
  const timer = setInterval(() => {
    if (Atomics.load(flags, STOPPED) === 1 || Atomics.load(flags, HANDLED) === 1) {
      clearInterval(timer);
      return;
    }
    if (dead === null) {
      const rank = ranks.find((r) => !processAlive(r.pid));
      if (rank) dead = { rank, at: Date.now() };
      return;
    }
    if (Date.now() - dead.at < graceMs) return;
    clearInterval(timer);
    writeSync(2, `quire: ${dead.rank.label} (pid ${dead.rank.pid}) exited, and a collective waiting on it would never ` +
      `end: the other ranks watched and this process (pid ${process.pid}) end now\n`);
    for (const r of ranks) {
      if (r !== dead.rank && processAlive(r.pid)) {
        try {
          process.kill(r.pid, 'SIGKILL');
        } catch { /* gone meanwhile */ }
      }
    }
    process.kill(process.pid, 'SIGKILL');
  }, pollMs);
}
