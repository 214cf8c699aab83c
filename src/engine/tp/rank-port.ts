// How rank 0 reaches another tensor-parallel rank, and how that rank reaches back: a worker thread (the CPU backend's
// ranks, which meet in shared memory; or QUIRE_TP_RANKS=thread) or a child process (CUDA's default, as the issue
// and vLLM run ranks: each rank's CUDA context, allocations and implicit syncs then stay in its own process, where two
// contexts in one process may stall each other while NCCL waits: docs/perf-log.md, session 30, call 4). Messages
// are structured clones either way (advanced serialization for the process: typed arrays stay typed arrays).

import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parentPort, Worker, workerData } from 'node:worker_threads';
import type { FollowerInit, FromFollower, ToFollower } from './protocol.js';

const FOLLOWER = new URL('./follower-main.js', import.meta.url);

/** Rank 0's handle on another rank. */
export interface RankPort {
  post(m: ToFollower): void;
  /** `fail`: the rank crashed or exited before it was told to. */
  listen(message: (m: FromFollower) => void, fail: (why: string) => void): void;
  terminate(): Promise<void>;
  /** A child process's id (none for a worker thread): rank-watchdog.ts watches it. */
  readonly pid?: number;
}

export function startRank(init: FollowerInit, mode: 'thread' | 'process'): RankPort {
  if (mode === 'thread') {
    const w = new Worker(FOLLOWER, { workerData: init });
    return {
      post: (m) => w.postMessage(m),
      listen: (message, fail) => {
        w.on('message', message);
        w.on('error', (err: Error) => fail(err.message));
        w.on('exit', (code) => { if (code !== 0) fail(`exited with code ${code}`); });
      },
      terminate: async () => void await w.terminate(),
    };
  }
  // NVLink multicast stays off in every process started (issue 42)
  const child = fork(fileURLToPath(FOLLOWER), [], { serialization: 'advanced', execArgv: rankExecArgv(process.execArgv),
    env: { ...process.env, NCCL_NVLS_ENABLE: '0' } });
  child.send({ type: 'init', init });
  let closed = false;
  return {
    ...(child.pid !== undefined ? { pid: child.pid } : {}),
    post: (m) => { if (child.connected) child.send(m); },
    listen: (message, fail) => {
      child.on('message', (m: FromFollower) => { if (m.type === 'closed') closed = true; message(m); });
      child.on('error', (err) => fail(err.message));
      child.on('exit', (code, signal) => { if (!closed) fail(`exited with ${signal ?? `code ${code}`}`); });
    },
    terminate: () => endChild(child),
  };
}

/** How long a child rank gets to end on SIGTERM before SIGKILL. */
export const RANK_TERM_GRACE_MS = 5000;

/**
 * Ends a child process: SIGTERM, then SIGKILL if it still runs after `graceMs`. A rank that ran NCCL over its network
 * transport was seen to spin on in its exit's teardown after it had closed, deaf to SIGTERM (session 35: node 1's
 * rank outlived its agent), so SIGTERM alone may never end it.
 */
export async function endChild(child: ChildProcess, graceMs = RANK_TERM_GRACE_MS): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * This process's node flags a child rank starts with: all but the ones that name what to run instead of a file
 * (-e / --eval, -p / --print and their code, --input-type): fork passes process.execArgv whole, so an engine started
 * from `node --input-type=module -e '...'` ran that code again in its child ranks, or failed to start them.
 */
export function rankExecArgv(execArgv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i]!;
    if (/^(?:-e|--eval|-p|--print|-pe|--input-type)$/.test(a)) i++;  // and its value
    else if (!/^(?:--eval|--print|--input-type)=/.test(a)) out.push(a);
  }
  return out;
}

/** A follower's side: its init and its channel to rank 0, in a worker thread or a child process. */
export async function followerChannel(): Promise<{ init: FollowerInit; post: (m: FromFollower) => void;
  onMessage: (f: (m: ToFollower) => void) => void; close: () => void }> {
  if (parentPort) {
    const port = parentPort;
    return { init: workerData as FollowerInit, post: (m) => port.postMessage(m), onMessage: (f) => void port.on('message', f),
      close: () => port.close() };
  }
  const send = process.send?.bind(process);
  if (!send) throw new Error('follower-main runs as a worker thread or a forked child process');
  const init = await new Promise<FollowerInit>((resolve) => process.once('message', (m: { init: FollowerInit }) => resolve(m.init)));
  return { init, post: (m) => void send(m), onMessage: (f) => void process.on('message', f),
    close: () => process.disconnect?.() };
}
