// Node 0 of multi-node.test.ts, in its own process (NCCL reads NCCL_P2P_DISABLE and NCCL_SHM_DISABLE once a
// process): the demo model's greedy transcripts under -tp 2 over --nnodes 2, printed as one JSON line.
//   node dist/test/gpu/multi-node-node0.js <master port>

import { transcripts } from './tp-prompts.js';

console.log(JSON.stringify(await transcripts({ tensorParallelSize: 2, nnodes: 2, masterPort: Number(process.argv[2]) })));
