// Tensor- and pipeline-parallel ranks on several machines (vLLM's and torchrun's --nnodes, --node-rank, --master-addr,
// --master-port): node 0 runs the engine and ranks 0 .. R-1 (R = tensorParallelSize x pipelineParallelSize / nnodes;
// with -pp as many as the nodes, node 0 runs the last stage, node nnodes - 1 the first); node n runs an agent
// (node-agent.ts) whose ranks nR .. (n+1)R-1 are child processes as node 0's are. The agent and node 0 talk over one
// TCP connection, length-prefixed structured clones (v8 serialization: a step's typed arrays stay typed arrays):
// the agent's hello, node 0's FollowerInits, then each rank's messages both ways. The collectives themselves go over
// NCCL, which finds its own way between the machines (NCCL's bootstrap, from the unique id in each FollowerInit).
//
// Node 0 writes its frames synchronously: its engine thread blocks in device syncs while the other ranks need the
// step it just mirrored, so a frame must be on the wire before mirror() returns, not queued behind the event loop.

import { createHash } from 'node:crypto';
import { writeSync } from 'node:fs';
import type { Socket } from 'node:net';
import { deserialize, serialize } from 'node:v8';
import type { ModelConfig } from '../../loader/types.js';
import { worldSize, type EngineOptions } from '../options.js';
import type { FollowerInit, FromFollower, ToFollower } from './protocol.js';

/** An agent's first frame: who it is and what it loaded (node 0 refuses a mismatch, naming it). */
export interface NodeHello {
  type: 'hello';
  nodeRank: number;
  identity: NodeIdentity;
}

/** What every node must agree on. */
export interface NodeIdentity {
  nnodes: number;
  tensorParallelSize: number;
  pipelineParallelSize: number;
  /** sha256 of the model's config as loaded (the same checkpoint on every machine). */
  config: string;
}

export type ToNode =
  | { type: 'start'; inits: FollowerInit[] }
  | { type: 'rank'; rank: number; m: ToFollower }
  /** Node 0 will not run with this node: why. */
  | { type: 'refused'; message: string };

export type FromNode = NodeHello | { type: 'rank'; rank: number; m: FromFollower } | { type: 'failed'; message: string };

export function nodeIdentity(options: Pick<EngineOptions, 'nnodes' | 'tensorParallelSize' | 'pipelineParallelSize'>,
  config: ModelConfig): NodeIdentity {
  return { nnodes: options.nnodes, tensorParallelSize: options.tensorParallelSize, pipelineParallelSize: options.pipelineParallelSize,
    config: createHash('sha256').update(JSON.stringify(config)).digest('hex').slice(0, 16) };
}

/** Why node `nodeRank` cannot join node 0 (`mine`: node 0's identity), or null. */
export function identityMismatch(mine: NodeIdentity, theirs: NodeIdentity, nodeRank: number): string | null {
  if (theirs.nnodes !== mine.nnodes) return `node ${nodeRank} was started with --nnodes ${theirs.nnodes}, node 0 with ${mine.nnodes}`;
  if (theirs.tensorParallelSize !== mine.tensorParallelSize) {
    return `node ${nodeRank} was started with --tensor-parallel-size ${theirs.tensorParallelSize}, node 0 with ${mine.tensorParallelSize}`;
  }
  if (theirs.pipelineParallelSize !== mine.pipelineParallelSize) {
    return `node ${nodeRank} was started with --pipeline-parallel-size ${theirs.pipelineParallelSize}, node 0 with ${mine.pipelineParallelSize}`;
  }
  if (theirs.config !== mine.config) return `node ${nodeRank} loaded another model (its config.json differs from node 0's)`;
  return null;
}

/**
 * Why these multi-node flags cannot run, or null: the node rank out of range, a size that does not split over the
 * nodes, or a part that stays on one machine (the CPU backend's ranks meet in shared memory; data parallelism).
 */
export function nodesRefusal(o: Pick<EngineOptions, 'nnodes' | 'nodeRank' | 'tensorParallelSize' | 'pipelineParallelSize' |
  'dataParallelSize' | 'backend'>): string | null {
  if (o.nodeRank < 0 || o.nodeRank >= o.nnodes) return `--node-rank ${o.nodeRank}: expected 0 to ${o.nnodes - 1} (--nnodes ${o.nnodes})`;
  if (o.nnodes === 1) return null;
  if (worldSize(o) % o.nnodes !== 0) {
    const ranks = o.pipelineParallelSize > 1 ? `--tensor-parallel-size ${o.tensorParallelSize} x --pipeline-parallel-size ` +
      `${o.pipelineParallelSize} (${worldSize(o)} ranks)` : `--tensor-parallel-size ${o.tensorParallelSize}`;
    return `${ranks} does not split evenly over --nnodes ${o.nnodes} (each node runs as many ranks)`;
  }
  if (o.backend === 'cpu') return '--nnodes > 1 needs CUDA: the CPU backend\'s ranks meet in shared memory, on one machine';
  if (o.dataParallelSize > 1) return '--nnodes > 1 with --data-parallel-size > 1 is not supported: one engine spans the nodes';
  return null;
}

/** Ranks node `nodeRank` runs. */
export function nodeRanks(o: Pick<EngineOptions, 'nnodes' | 'tensorParallelSize' | 'pipelineParallelSize'>, nodeRank: number): number[] {
  const per = worldSize(o) / o.nnodes;
  return Array.from({ length: per }, (_, i) => nodeRank * per + i);
}

/** One frame: a 4-byte little-endian length, then the message's v8 serialization. */
export function encodeFrame(m: unknown): Buffer {
  const body = serialize(m);
  const head = Buffer.alloc(4);
  head.writeUInt32LE(body.length, 0);
  return Buffer.concat([head, body]);
}

/** Calls `on` with each whole message as its bytes arrive on `socket`. */
export function onFrames<T>(socket: Socket, on: (m: T) => void): void {
  let pending: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 4) {
      const n = pending.readUInt32LE(0);
      if (pending.length < 4 + n) break;
      const m = deserialize(pending.subarray(4, 4 + n)) as T;
      pending = pending.subarray(4 + n);
      on(m);
    }
  });
}

/** Writes a frame before returning (a full socket buffer is waited out here, not left to the event loop). */
export function sendFrameSync(socket: Socket, m: unknown): void {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  const frame = encodeFrame(m);
  if (fd === undefined || fd < 0) {
    socket.write(frame);  // not a plain TCP handle (no descriptor to write to): the event loop sends it
    return;
  }
  let off = 0;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (off < frame.length) {
    try {
      off += writeSync(fd, frame, off, frame.length - off);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
      Atomics.wait(pause, 0, 0, 1);  // the peer is reading: a millisecond, then the rest
    }
  }
}

/** Writes a frame through the event loop (the agent's side: it never blocks). */
export function sendFrame(socket: Socket, m: unknown): void {
  socket.write(encodeFrame(m));
}
