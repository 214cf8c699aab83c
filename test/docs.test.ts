// Every README block marked `runnable` runs against the bundled demo model,
// served as `npm start` serves it (on a free port instead of 8000).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const PORT = 18431;

function runnableBlocks(): { lang: string; code: string }[] {
  const md = readFileSync('README.md', 'utf8');
  return [...md.matchAll(/```(\w+) runnable\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1]!, code: m[2]!.replaceAll('127.0.0.1:8000', `127.0.0.1:${PORT}`) }));
}

test('README runnable commands work against the demo model', async () => {
  const blocks = runnableBlocks();
  assert.ok(blocks.length >= 5, `found ${blocks.length} runnable blocks`);
  const server = spawn(process.execPath, ['dist/src/cli/main.js', 'serve', '--port', String(PORT), '--backend', 'cpu'], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve, reject) => {
      let out = '';
      server.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('ready on')) resolve();
      });
      server.on('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
    });
    const tmp = mkdtempSync(join('dist', 'docs-'));
    try {
      for (const [i, b] of blocks.entries()) {
        let r;
        if (b.lang === 'js') {
          const file = join(tmp, `block-${i}.mjs`);
          writeFileSync(file, b.code);
          r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 120_000 });
        } else {
          r = spawnSync('bash', ['-euo', 'pipefail', '-c', b.code], { encoding: 'utf8', timeout: 120_000 });
        }
        assert.equal(r.status, 0, `README block ${i} failed:\n${b.code}\n${r.stdout}\n${r.stderr}`);
        assert.ok(r.stdout.trim().length > 0, `README block ${i} printed nothing:\n${b.code}`);
        if (b.code.includes('curl') && !b.code.includes('"stream": true')) {
          const body = JSON.parse(r.stdout) as { choices: unknown[] };
          assert.equal(body.choices.length, 1);
        }
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  } finally {
    server.kill('SIGTERM');
  }
});
