// Node 0's side of several machines (node-link.ts): it listens on --master-addr:--master-port, takes one agent per
// other node within QUIRE_NODE_TIMEOUT_S, checks each agent's identity, hands it its ranks' FollowerInits, and gives
// the leader one RankPort per remote rank over that node's connection.

import { createServer, type Socket } from 'node:net';
import { readKnob } from '../../knobs/knobs.js';
import type { EngineOptions } from '../options.js';
import type { FollowerInit, FromFollower } from './protocol.js';
import type { RankPort } from './rank-port.js';
import { identityMismatch, nodeRanks, onFrames, sendFrameSync, type FromNode, type NodeIdentity } from './node-link.js';

interface RemoteNode {
  nodeRank: number;
  socket: Socket;
}

/** Waits for the agents of nodes 1 .. nnodes - 1 (each checked against `identity`); rejects naming what went wrong. */
export async function acceptNodes(options: EngineOptions, identity: NodeIdentity): Promise<{ nodes: RemoteNode[]; close: () => void }> {
  const timeoutS = readKnob('QUIRE_NODE_TIMEOUT_S');
  const server = createServer();
  server.on('connection', (s) => s.setNoDelay(true));
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(new Error(err.code === 'EADDRNOTAVAIL'
      ? `--master-addr ${options.masterAddr} is not an address of this machine (node 0 listens on it)`
      : `cannot listen on ${options.masterAddr}:${options.masterPort} for the other nodes: ${err.message}`)));
    server.listen(options.masterPort, options.masterAddr, () => resolve());
  });
  const nodes = new Map<number, RemoteNode>();
  const close = (): void => {
    server.close();
    for (const n of nodes.values()) n.socket.destroy();
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        const missing = Array.from({ length: options.nnodes - 1 }, (_, i) => i + 1).filter((n) => !nodes.has(n));
        reject(new Error(`node${missing.length > 1 ? 's' : ''} ${missing.join(', ')} did not join ${options.masterAddr}:` +
          `${options.masterPort} within ${timeoutS} s (QUIRE_NODE_TIMEOUT_S): start each with the same flags and ` +
          `--nnodes ${options.nnodes} --node-rank <n> --master-addr ${options.masterAddr} --master-port ${options.masterPort}`));
      }, timeoutS * 1000);
      const fail = (err: Error): void => { clearTimeout(timer); reject(err); };
      server.on('connection', (socket: Socket) => {
        let greeted = false;
        onFrames<FromNode>(socket, (m) => {
          if (greeted || m.type !== 'hello') return;
          greeted = true;
          const why = m.nodeRank < 1 || m.nodeRank >= options.nnodes ? `node rank ${m.nodeRank} is not 1 to ${options.nnodes - 1}`
            : nodes.has(m.nodeRank) ? `two nodes joined as node ${m.nodeRank}` : identityMismatch(identity, m.identity, m.nodeRank);
          if (why !== null) {
            sendFrameSync(socket, { type: 'refused', message: why });
            socket.end();
            fail(new Error(why));
            return;
          }
          nodes.set(m.nodeRank, { nodeRank: m.nodeRank, socket });
          if (nodes.size === options.nnodes - 1) {
            clearTimeout(timer);
            resolve();
          }
        });
      });
    });
  } catch (err) {
    close();
    throw err;
  }
  server.close();  // every node is in; no later connection is taken
  return { nodes: [...nodes.values()], close };
}

/**
 * Starts each remote node's ranks (their FollowerInits from `init`) and returns a RankPort a rank, in rank order. A
 * node that disconnects fails each of its ranks.
 */
export function remoteRanks(nodes: RemoteNode[], options: EngineOptions, init: (rank: number, device: number) => FollowerInit):
  RankPort[] {
  const ports: { rank: number; port: RankPort }[] = [];
  for (const node of nodes) {
    const ranks = nodeRanks(options, node.nodeRank);
    const handlers = new Map<number, { message: (m: FromFollower) => void; fail: (why: string) => void }>();
    let ended = false;
    onFrames<FromNode>(node.socket, (m) => {
      if (m.type === 'rank') handlers.get(m.rank)?.message(m.m);
      else if (m.type === 'failed') for (const h of handlers.values()) h.fail(`node ${node.nodeRank}: ${m.message}`);
    });
    node.socket.on('close', () => {
      if (!ended) for (const h of handlers.values()) h.fail(`node ${node.nodeRank} disconnected`);
    });
    node.socket.on('error', () => {});  // 'close' follows and reports it
    sendFrameSync(node.socket, { type: 'start', inits: ranks.map((r, i) => init(r, options.deviceOrdinal + i)) });
    let open = ranks.length;
    for (const rank of ranks) {
      ports.push({ rank, port: {
        post: (m) => { if (!node.socket.destroyed) sendFrameSync(node.socket, { type: 'rank', rank, m }); },
        listen: (message, fail) => void handlers.set(rank, { message, fail }),
        terminate: async () => {
          if (--open > 0) return;
          ended = true;
          node.socket.end();
        },
      } });
    }
  }
  return ports.sort((a, b) => a.rank - b.rank).map((p) => p.port);
}
