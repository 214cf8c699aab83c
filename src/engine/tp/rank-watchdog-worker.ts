// The watchdog thread's entry (rank-watchdog.ts says why it exists).

import { workerData } from 'node:worker_threads';
import { runWatchdog, type WatchedRank } from './rank-watchdog.js';

const d = workerData as { ranks: WatchedRank[]; flags: Int32Array; pollMs: number; graceMs: number };
runWatchdog(d.ranks, d.flags, d.pollMs, d.graceMs);
