// Tensor-parallel ranks on several machines (engine/tp/node-link.ts, node-leader.ts, node-agent.ts), on one machine
// and without a GPU: the frames between nodes, node 0 refusing an agent that differs from it (naming how), bounded
// waits on both sides, and an agent relaying its ranks' messages to node 0 (here a rank's failure: NCCL ranks need
// CUDA). The collectives over the network run in test/gpu/multi-node.test.ts.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';
import { engineOptions } from '../../src/engine/options.js';
import { runNodeAgent } from '../../src/engine/tp/node-agent.js';
import { acceptNodes, remoteRanks } from '../../src/engine/tp/node-leader.js';
import { identityMismatch, nodeIdentity, nodeRanks, nodesRefusal, onFrames, sendFrame, sendFrameSync, type ToNode } from '../../src/engine/tp/node-link.js';
import { loadModel } from '../../src/loader/model-dir.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { freePort } from './free-port.js';

const root = mkdtempSync(join(tmpdir(), 'quire-nodes-'));
const model = join(root, 'qwen3');
before(async () => {
  await makeTestModel({ shape: 'tiny-qwen3', outDir: model, dtype: 'f32', seed: 3 });
});
after(() => rmSync(root, { recursive: true, force: true }));

/** A free local TCP port (listened on once, then released). */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
  }
}

test('frames cross a TCP connection whole and in order, typed arrays as typed arrays, a 24 MiB one written synchronously', async () => {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  // the reader in its own thread: a synchronous write past the socket buffer waits for a reader that is running
  const reader = new Worker(`
    const { workerData, parentPort } = require('node:worker_threads');
    const { connect } = require('node:net');
    import(workerData.link).then(({ onFrames }) => {
      const s = connect(workerData.port, '127.0.0.1');
      let n = 0;
      onFrames(s, (m) => {
        const sum = m.big ? m.big.reduce((a, v) => (a + v) | 0, 0) : null;
        parentPort.postMessage({ type: m.type, ids: m.ids ?? null, typed: m.big instanceof Int32Array, length: m.big?.length ?? 0, sum });
        if (++n === 3) s.destroy();
      });
    });`, { eval: true, workerData: { port: (server.address() as AddressInfo).port,
    link: new URL('../../src/engine/tp/node-link.js', import.meta.url).href } });
  const got: { type: string; ids: Int32Array | null; typed: boolean; length: number; sum: number | null }[] = [];
  const all = new Promise<void>((resolve) => reader.on('message', (m) => { got.push(m); if (got.length === 3) resolve(); }));
  const peer = await accepted;
  const big = new Int32Array(6 << 20).map((_, i) => i ^ 0x5a5a);
  sendFrameSync(peer, { type: 'a', ids: Int32Array.from([1, 2, 3]) });
  sendFrameSync(peer, { type: 'big', big });  // past any socket buffer: written out before it returns
  sendFrame(peer, { type: 'c' });
  await all;
  assert.deepEqual(got.map((m) => m.type), ['a', 'big', 'c']);
  assert.deepEqual(got[0]!.ids, Int32Array.from([1, 2, 3]));
  assert.equal(got[1]!.typed, true);
  assert.equal(got[1]!.length, big.length);
  assert.equal(got[1]!.sum, big.reduce((a, v) => (a + v) | 0, 0));
  await reader.terminate();
  peer.destroy();
  server.close();
});

test('multi-node flags: the node rank in range, a size that splits over the nodes, CUDA only, no data parallelism', () => {
  const o = (x: object) => ({ ...engineOptions({ model: 'm', tensorParallelSize: 4, nnodes: 2 }), ...x });
  assert.equal(nodesRefusal(o({ nodeRank: 1 })), null);
  assert.match(nodesRefusal(o({ nodeRank: 2 }))!, /--node-rank 2: expected 0 to 1 \(--nnodes 2\)/);
  assert.match(nodesRefusal(o({ tensorParallelSize: 3 }))!, /--tensor-parallel-size 3 does not split evenly over --nnodes 2/);
  assert.match(nodesRefusal(o({ backend: 'cpu' }))!, /needs CUDA/);
  assert.match(nodesRefusal(o({ dataParallelSize: 2 }))!, /--data-parallel-size > 1 is not supported/);
  assert.deepEqual(nodeRanks({ nnodes: 2, tensorParallelSize: 4, pipelineParallelSize: 1 }, 1), [2, 3]);
  // pipeline stages: every rank of tp x pp counts, and node 1 of 2 runs the first stage's (ranks count down the stages)
  assert.deepEqual(nodeRanks({ nnodes: 2, tensorParallelSize: 2, pipelineParallelSize: 2 }, 1), [2, 3]);
  assert.equal(nodesRefusal(o({ tensorParallelSize: 1, pipelineParallelSize: 2 })), null);
  assert.match(nodesRefusal(o({ tensorParallelSize: 1, pipelineParallelSize: 3 }))!,
    /--tensor-parallel-size 1 x --pipeline-parallel-size 3 \(3 ranks\) does not split evenly over --nnodes 2/);
});

test('an agent that differs from node 0 is refused, naming the difference, on both sides', async () => {
  const { config } = await loadModel(model, {});
  const port = await freePort();
  const options = engineOptions({ model, tensorParallelSize: 2, nnodes: 2, masterPort: port });
  const mine = nodeIdentity(options, config);
  assert.match(identityMismatch(mine, { ...mine, config: 'other' }, 1)!, /node 1 loaded another model/);
  assert.match(identityMismatch(mine, { ...mine, pipelineParallelSize: 2 }, 1)!,
    /node 1 was started with --pipeline-parallel-size 2, node 0 with 1/);
  const waiting = acceptNodes(options, mine);
  const agent = connect(port, '127.0.0.1');
  const answer = new Promise<ToNode>((r) => onFrames<ToNode>(agent, r));
  sendFrame(agent, { type: 'hello', nodeRank: 1, identity: { ...mine, tensorParallelSize: 4 } });
  await assert.rejects(waiting, /node 1 was started with --tensor-parallel-size 4, node 0 with 2/);
  assert.deepEqual(await answer, { type: 'refused', message: 'node 1 was started with --tensor-parallel-size 4, node 0 with 2' });
  agent.destroy();
});

test('bounded waits: node 0 names the nodes that did not join; an agent names the node 0 it could not reach', async () => {
  await withEnv({ QUIRE_NODE_TIMEOUT_S: '1' }, async () => {
    const port = await freePort();
    const { config } = await loadModel(model, {});
    const options = engineOptions({ model, tensorParallelSize: 4, nnodes: 4, masterPort: port });
    await assert.rejects(acceptNodes(options, nodeIdentity(options, config)),
      /nodes 1, 2, 3 did not join 127.0.0.1:\d+ within 1 s \(QUIRE_NODE_TIMEOUT_S\)/);
    await assert.rejects(runNodeAgent(engineOptions({ model, tensorParallelSize: 2, nnodes: 2, nodeRank: 1, masterPort: port })),
      /node 1: cannot reach node 0 at 127.0.0.1:\d+ within 1 s/);
  });
});

test('quire serve --node-rank 1 with no node 0 exits with the reason, no stack trace', async () => {
  const port = await freePort();
  const r = spawnSync(process.execPath, ['dist/src/cli/main.js', 'serve', model, '-tp', '2', '--nnodes', '2', '--node-rank', '1',
    '--master-port', String(port)], { env: { ...process.env, QUIRE_NODE_TIMEOUT_S: '1' }, encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /quire serve: node 1: cannot reach node 0 at 127.0.0.1:\d+ within 1 s/);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
});

test('an agent starts the ranks node 0 hands it and relays their messages (a rank\'s failure reaches node 0, naming it)', async () => {
  const { config } = await loadModel(model, {});
  const port = await freePort();
  const options = engineOptions({ model, tensorParallelSize: 2, nnodes: 2, masterPort: port });
  const joined = acceptNodes(options, nodeIdentity(options, config));
  const agent = runNodeAgent({ ...options, nodeRank: 1 });
  const { nodes, close } = await joined;
  assert.deepEqual(nodes.map((n) => n.nodeRank), [1]);
  // the rank loads on the agent's machine, then cannot join an NCCL group on the CPU backend: it says so
  const ports = remoteRanks(nodes, options, (rank, device) => ({ rank, device, peer: false, options: { ...options, backend: 'cpu' },
    tp: { rank, size: 2, comm: { kind: 'nccl', id: new Uint8Array(128) } }, pp: { stage: 0, size: 1, layers: null, comm: null } }));
  assert.equal(ports.length, 1);
  const seen: string[] = [];
  const why = await new Promise<string>((resolve) => ports[0]!.listen((m) => {
    seen.push(m.type);
    if (m.type === 'failed') resolve(m.message);
  }, resolve));
  assert.ok(seen.includes('ready'), `messages before the failure: ${seen.join(', ')}`);
  assert.match(why, /tensor-parallel rank 1: .*NCCL communicator is for the CUDA backend/);
  close();
  await assert.rejects(agent, /node 0 .* disconnected|rank 1/);
});
