// Runs the compiled tests under dist/test with node's built-in runner.
// --gpu runs only dist/test/gpu (the CUDA tests); otherwise those are left out.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const gpu = process.argv.includes('--gpu');
const filters = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const root = 'dist/test';
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith('.test.js')) files.push(p);
  }
})(root);
const chosen = files
  .filter((f) => (gpu ? f.startsWith(join(root, 'gpu')) : !f.startsWith(join(root, 'gpu'))))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
if (chosen.length === 0) {
  console.error(`no test file under ${root} matches ${filters.join(' ')}`);
  process.exit(1);
}
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=2', ...chosen], { stdio: 'inherit' });
process.exit(r.status ?? 1);
