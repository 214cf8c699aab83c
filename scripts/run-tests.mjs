// Runs the compiled tests under dist/test with node's built-in runner, quietly:
// TAP only for failures, each skip with its reason, and a closing summary line
// (scripts/test-reporter.mjs).
//   (no flag)  every test but dist/test/gpu and dist/test/kernels
//   --gpu      only dist/test/gpu (the CUDA tests; they skip without a GPU)
//   --kernels  only dist/test/kernels (every kernel compiled by nvcc; skips without it; cached by source hash)
//   --tap      node's full TAP output instead of the quiet reporter
// Other arguments keep only the files whose path contains one of them.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const suite = process.argv.includes('--gpu') ? 'gpu' : process.argv.includes('--kernels') ? 'kernels' : null;
const filters = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const root = 'dist/test';
const separate = ['gpu', 'kernels'].map((d) => join(root, d));
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith('.test.js')) files.push(p);
  }
})(root);
const inSuite = (f) => (suite ? f.startsWith(join(root, suite)) : !separate.some((d) => f.startsWith(d)));
const chosen = files.filter(inSuite).filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
if (chosen.length === 0) {
  console.error(`no test file under ${root} matches ${filters.join(' ')}`);
  process.exit(1);
}
const reporter = process.argv.includes('--tap') ? 'tap' : fileURLToPath(new URL('./test-reporter.mjs', import.meta.url));
// The GPU files one at a time: each engine takes --gpu-memory-utilization 0.9 of the device, so a second file's engine
// found no KV budget (session 34), and a tensor-parallel rank that fails to start leaves its peer waiting in NCCL.
const concurrency = suite === 'gpu' ? 1 : 2;
const r = spawnSync(process.execPath, ['--test', `--test-concurrency=${concurrency}`, `--test-reporter=${reporter}`, ...chosen],
  { stdio: 'inherit' });
process.exit(r.status ?? 1);
