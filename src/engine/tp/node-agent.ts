// A node other than 0 (node-link.ts): `quire serve <the same flags> --nnodes N --node-rank n --master-addr A
// --master-port P` runs this instead of a server. It reaches node 0 within QUIRE_NODE_TIMEOUT_S (node 0 may start
// later), says who it is, starts the ranks node 0 hands it as child processes on this machine's devices, and relays
// their messages. It ends when node 0 closes the connection, or with the first error, naming it.

import { connect, type Socket } from 'node:net';
import { readKnob } from '../../knobs/knobs.js';
import { loadModel } from '../../loader/model-dir.js';
import type { EngineOptions } from '../options.js';
import { nodeIdentity, nodeRanks, nodesRefusal, onFrames, sendFrame, type ToNode } from './node-link.js';
import { rankLabel, type FromFollower } from './protocol.js';
import { startRank, type RankPort } from './rank-port.js';

/** Connects to node 0, retrying each second until `deadline` (ms since the epoch). */
async function reach(options: EngineOptions, deadline: number): Promise<Socket> {
  for (;;) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const s = connect(options.masterPort, options.masterAddr, () => resolve(s));
        s.once('error', reject);
      });
    } catch (err) {
      if (Date.now() + 1000 > deadline) {
        throw new Error(`node ${options.nodeRank}: cannot reach node 0 at ${options.masterAddr}:${options.masterPort} ` +
          `within ${readKnob('QUIRE_NODE_TIMEOUT_S')} s (QUIRE_NODE_TIMEOUT_S): ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** Runs this node's ranks for node 0; resolves when node 0 is done with them, rejects with the first failure. */
export async function runNodeAgent(options: EngineOptions, log: (line: string) => void = () => {}): Promise<void> {
  const refusal = nodesRefusal(options);
  if (refusal) throw new Error(refusal);
  if (options.nodeRank === 0) throw new Error('node 0 runs the engine (quire serve without --node-rank, or --node-rank 0)');
  const dir = await loadModel(options.model, options);
  process.env.NCCL_NVLS_ENABLE ??= '0';  // NVLink multicast stays off (issue 42)
  const socket = await reach(options, Date.now() + readKnob('QUIRE_NODE_TIMEOUT_S') * 1000);
  socket.setNoDelay(true);
  const ranks = nodeRanks(options, options.nodeRank);
  log(`node ${options.nodeRank} of ${options.nnodes}: ranks ${ranks[0]} to ${ranks.at(-1)}, following node 0 at ` +
    `${options.masterAddr}:${options.masterPort}`);
  sendFrame(socket, { type: 'hello', nodeRank: options.nodeRank, identity: nodeIdentity(options, dir.config) });
  const ports = new Map<number, RankPort>();
  const stop = async (): Promise<void> => void await Promise.all([...ports.values()].map((p) => p.terminate()));
  let closed = 0;
  return new Promise<void>((resolve, reject) => {
    let failure: Error | null = null;
    const fail = (message: string): void => {
      if (failure) return;
      failure = new Error(message);
      if (!socket.destroyed) sendFrame(socket, { type: 'failed', message });
      void stop().then(() => { socket.end(); reject(failure); });
    };
    onFrames<ToNode>(socket, (m) => {
      if (m.type === 'refused') fail(`node 0 refused node ${options.nodeRank}: ${m.message}`);
      else if (m.type === 'start') {
        for (const given of m.inits) {
          // this machine's path to the model (the identity check found the same config there)
          const init = { ...given, options: { ...given.options, model: options.model } };
          const port = startRank(init, 'process');
          const relay = (msg: FromFollower): void => {
            if (msg.type === 'closed') closed++;
            sendFrame(socket, { type: 'rank', rank: init.rank, m: msg });
          };
          port.listen(relay, (why) => fail(`${rankLabel(init.rank, init.tp, init.pp)}: ${why}`));
          ports.set(init.rank, port);
        }
      } else if (m.type === 'rank') ports.get(m.rank)?.post(m.m);
    });
    socket.on('error', () => {});  // 'close' follows
    socket.on('close', () => {
      if (failure) return;
      // every rank closed first: node 0 shut the engine down; otherwise node 0 is gone
      if (closed === ranks.length) {
        log(`node ${options.nodeRank}: node 0 shut the engine down; ending this node's ranks`);
        void stop().then(() => resolve());
      } else fail(`node 0 (${options.masterAddr}:${options.masterPort}) disconnected, ${closed} of ${ranks.length} of ` +
        'this node\'s ranks closed');
    });
  });
}
