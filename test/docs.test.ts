// Every block marked `runnable` in README.md and docs/*.md runs against the bundled demo model, served as
// `npm start` serves it (on the CPU backend, on a free port instead of 8000). A ```text expected (or
// ```json expected) block right after a runnable block is its output: its pieces between `...` must appear in the
// output, in order. README.md stays short and opens with the two set-up commands; relative links resolve.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { freePort } from './engine/free-port.js';

// a free port, not a fixed one: another checkout's test run on this machine held 18431 (session 35)
const PORT = await freePort();

/** Pages written by other parts of the work (the vLLM flag table, the knob registry): linked before they land. */
const PAGES_FROM_ELSEWHERE = new Set(['docs/vllm-flags.md', 'docs/knobs.md']);

export interface DocBlock {
  page: string;
  lang: string;
  code: string;
  /** The expected-output block that follows, if any. */
  expected: string | null;
}

export function docPages(): string[] {
  const docs = existsSync('docs') ? readdirSync('docs').filter((f) => f.endsWith('.md')).sort().map((f) => join('docs', f)) : [];
  return ['README.md', ...docs];
}

export function runnableBlocks(page: string, md: string): DocBlock[] {
  return [...md.matchAll(/```(\w+) runnable\n([\s\S]*?)```\n(?:\n?```(?:text|json) expected\n([\s\S]*?)```)?/g)].map((m) => ({
    page, lang: m[1]!, code: m[2]!.replaceAll('127.0.0.1:8000', `127.0.0.1:${PORT}`), expected: m[3] ?? null,
  }));
}

/** Whether `output` holds the expected block's pieces (split at `...`) in order. */
export function matchesExpected(output: string, expected: string): boolean {
  let at = 0;
  for (const piece of expected.trim().split('...').map((p) => p.trim()).filter((p) => p.length > 0)) {
    const i = output.indexOf(piece, at);
    if (i < 0) return false;
    at = i + piece.length;
  }
  return true;
}

test('expected-output blocks match in order, with ... for what varies', () => {
  assert.ok(matchesExpected('{"id":"cmpl-42","text":"hi"}', '{"id":"cmpl-...","text":"hi"}'));
  assert.ok(!matchesExpected('{"text":"hi","id":"cmpl-42"}', '{"id":"cmpl-...","text":"hi"}'));
  assert.ok(!matchesExpected('{"id":"cmpl-42","text":"ho"}', '{"id":"cmpl-...","text":"hi"}'));
  const md = '```sh runnable\necho a\n```\n\n```text expected\na\n```\n\n```sh runnable\necho b\n```\n';
  assert.deepEqual(runnableBlocks('x.md', md).map((b) => [b.code, b.expected]), [['echo a\n', 'a\n'], ['echo b\n', null]]);
});

test('README.md is under 10 KB and opens with the two set-up commands', () => {
  const readme = readFileSync('README.md', 'utf8');
  assert.ok(Buffer.byteLength(readme) < 10 * 1024, `README.md is ${Buffer.byteLength(readme)} bytes`);
  const first = /```sh\n([\s\S]*?)```/.exec(readme)![1]!;
  assert.match(first, /^npm ci && npm start\s/m);
  assert.match(first, /^npm test\s/m);
});

test('relative links in README.md and docs/ point at files that exist', () => {
  const broken: string[] = [];
  for (const page of docPages()) {
    const md = readFileSync(page, 'utf8').replace(/```[\s\S]*?```/g, '');
    for (const m of md.matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue;
      const path = join(dirname(page), target);
      if (!existsSync(path) && !PAGES_FROM_ELSEWHERE.has(path)) broken.push(`${page}: ${target}`);
    }
  }
  assert.deepEqual(broken, []);
});

test('runnable blocks in README.md and docs/ work against the demo model', async () => {
  const blocks = docPages().flatMap((p) => runnableBlocks(p, readFileSync(p, 'utf8')));
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
        const where = `${b.page} runnable block ${i}`;
        if (b.lang === 'js') {
          const file = join(tmp, `block-${i}.mjs`);
          writeFileSync(file, b.code);
          r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 120_000 });
        } else {
          r = spawnSync('bash', ['-euo', 'pipefail', '-c', b.code], { encoding: 'utf8', timeout: 120_000 });
        }
        assert.equal(r.status, 0, `${where} failed:\n${b.code}\n${r.stdout}\n${r.stderr}`);
        assert.ok(r.stdout.trim().length > 0, `${where} printed nothing:\n${b.code}`);
        if (b.expected !== null) {
          assert.ok(matchesExpected(r.stdout, b.expected), `${where}: the output is not the expected one:\n${b.code}\n`
            + `expected:\n${b.expected}\ngot:\n${r.stdout}`);
        }
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  } finally {
    server.kill('SIGTERM');
  }
});
