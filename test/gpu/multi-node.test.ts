// Tensor parallelism across "machines" on one 2-GPU host (skipped on fewer GPUs), as issue 42 asks: node 0 and
// node 1 are separate processes, each seeing one GPU (CUDA_VISIBLE_DEVICES), joined by --nnodes 2 and NCCL's network
// transport forced (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, which also keeps the peer-memory all-reduce off). The
// path that crosses machines then runs here: node 1 is `quire serve --node-rank 1` (its agent), node 0 the LLM
// class. Its greedy transcripts must be -tp 2's over NVLink in one node, computed in this process.
//   npm run build && node scripts/run-tests.mjs --gpu multi-node

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cudaAvailable } from '../../src/backend/cuda/probe.js';
import { transcriptMd5 } from '../../src/lab/gate-transcript.js';
import { defaultModelDir } from '../../src/loader/default-model.js';
import { transcripts } from './tp-prompts.js';
import { freePort } from '../engine/free-port.js';

const probe = cudaAvailable();
const skip = !probe.ok ? `no CUDA device: ${probe.reason}`
  : probe.numDevices < 2 ? `needs 2 CUDA devices, found ${probe.numDevices}` : false;

/** Runs a command to its end; its stdout, or a rejection with its stderr's tail. */
function run(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    p.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    p.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${args.slice(0, 2).join(' ')} exited ${code}: ${err.slice(-2000)}`))));
  });
}

test('-tp 2 over --nnodes 2 on the forced network transport gives -tp 2\'s transcripts over NVLink; both nodes end',
  { skip, timeout: 600_000 }, async (t) => {
    const nvlink = await transcripts({ tensorParallelSize: 2 });
    const port = await freePort();
    const network = { ...process.env, NCCL_P2P_DISABLE: '1', NCCL_SHM_DISABLE: '1', NCCL_NVLS_ENABLE: '0' };
    const [node0, node1] = await Promise.all([
      run(['dist/test/gpu/multi-node-node0.js', String(port)], { ...network, CUDA_VISIBLE_DEVICES: '0' }),
      run(['dist/src/cli/main.js', 'serve', defaultModelDir(), '-tp', '2', '--nnodes', '2', '--node-rank', '1',
        '--master-port', String(port), '--max-model-len', '512'], { ...network, CUDA_VISIBLE_DEVICES: '1' }),
    ]);
    const across = JSON.parse(node0.trim().split('\n').at(-1)!) as number[][];
    t.diagnostic(`md5 -tp 2 NVLink ${transcriptMd5(nvlink)}, --nnodes 2 network ${transcriptMd5(across)}; node 1 said: ${node1.trim()}`);
    assert.deepEqual(across, nvlink);
    // nothing of either node outlives it: no process of this one's is left but the test runner's own
    const left = spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' }).stdout
      .split('\n').filter((l) => l.trim() !== '' && !l.includes(' ps '));
    assert.deepEqual(left, [], `processes left: ${left.join('; ')}`);
  });
