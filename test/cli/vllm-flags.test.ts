// Every row of docs/vllm-flags.md is a vLLM flag that `quire serve` parses (or refuses with the reason), and the
// document is the one written from the list in code.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { serveCommand } from '../../src/cli/serve.js';
import { vllmShortFlags } from '../../src/cli/engine-flags.js';
import { vllmFlagMarkdown, vllmFlagTable } from '../../src/cli/vllm-flags.js';
import { packageRoot } from '../../src/cli/default-model.js';

/** Parses argv with quire serve, its action replaced (nothing loads); returns commander's error output, or null. */
async function parseServe(argv: readonly string[]): Promise<{ error: string | null; flags: Record<string, unknown> }> {
  let err = '';
  let flags: Record<string, unknown> = {};
  const cmd = serveCommand().exitOverride().configureOutput({ writeErr: (s) => { err += s; }, writeOut: () => {} });
  cmd.action((_model: unknown, f: Record<string, unknown>) => { flags = f; });
  try {
    await cmd.parseAsync(vllmShortFlags(['--model', '/m', ...argv.filter((a, i) => !(i === 0 && a === '/m'))]), { from: 'user' });
    return { error: null, flags };
  } catch {
    return { error: err, flags };
  }
}

for (const row of vllmFlagTable()) {
  test(`vLLM's ${row.flag}: ${row.status}`, async () => {
    assert.ok(row.argv.length > 0);
    for (const argv of row.argv) {
      const { error } = await parseServe(argv);
      if (row.status === 'refused') {
        assert.ok(error, `${argv.join(' ')} is refused`);
        assert.ok(error.includes(argv[0]!), `the error names ${argv[0]}: ${error}`);
        assert.ok(error.includes(row.quire.replace(/^refused: /, '')), `the error gives the reason: ${error}`);
      } else {
        assert.equal(error, null, `${argv.join(' ')} parses`);
      }
    }
  });
}

test('docs/vllm-flags.md is the table written from src/cli/vllm-flags.ts (node scripts/vllm-flags-doc.mjs)', () => {
  assert.equal(readFileSync(`${packageRoot()}/docs/vllm-flags.md`, 'utf8'), vllmFlagMarkdown());
});

test('the flags the issue named run as vLLM spells them, and boolean pairs set both ways', async () => {
  const on = await parseServe(['--enable-prefix-caching', '--kv-cache-memory-bytes', '2G', '--disable-log-requests',
    '--uvicorn-log-level', 'warning']);
  assert.equal(on.error, null);
  assert.equal(on.flags.enablePrefixCaching, true);
  assert.equal(on.flags.kvCacheMemoryBytes, 2 ** 31);
  const off = await parseServe(['--no-enable-prefix-caching', '--no-async-scheduling', '--enforce-eager']);
  assert.equal(off.flags.enablePrefixCaching, false);
  assert.equal(off.flags.asyncScheduling, false);
  assert.equal(off.flags.enforceEager, true);
});

test('bad values are CLI errors naming the flag, before any model loads', async () => {
  for (const [argv, message] of [
    [['--max-num-seqs', '0'], /'--max-num-seqs <n>' argument '0' is invalid\. expected a positive integer/],
    [['--block-size', '0'], /'--block-size <n>' argument '0' is invalid/],
    [['--max-num-batched-tokens', '0'], /--max-num-batched-tokens: expected a positive integer/],
    [['--gpu-memory-utilization', '1.5'], /--gpu-memory-utilization: expected a fraction in \(0, 1\]/],
    [['--port', '70000'], /--port takes an integer from 0 to 65535/],
    [['--kv-cache-memory-bytes', 'lots'], /--kv-cache-memory-bytes: expected a positive integer/],
    [['--shutdown-timeout', '-1'], /'--shutdown-timeout <s>' argument '-1' is invalid/],
    [['--tokenizer-mode', 'slow'], /--tokenizer-mode slow: Quire reads tokenizer\.json \(the fast tokenizer\) only \(accepted: auto, hf\)/],
    [['--uvicorn-log-level', 'loud'], /argument 'loud' is invalid/],
  ] as const) {
    const { error } = await parseServe(argv);
    assert.match(error ?? '', message, argv.join(' '));
  }
});

test('--help lines stay under 100 characters, in groups', async () => {
  let out = '';
  const cmd = serveCommand().exitOverride().configureOutput({ writeOut: (s) => { out += s; }, writeErr: () => {} });
  await assert.rejects(cmd.parseAsync(['--help'], { from: 'user' }));
  for (const line of out.split('\n')) assert.ok(line.length <= 100, `${line.length}: ${line}`);
  for (const group of ['Model:', 'Engine and KV cache:', 'Scheduling:', 'Server:', 'Tools, reasoning and pooling:', 'Lab and debugging:']) {
    assert.ok(out.includes(`\n${group}\n`), group);
  }
});

test('--enable-log-requests and --uvicorn-log-level turn the HTTP server\'s log on at that level', async () => {
  const { serveLogger } = await import('../../src/cli/serve.js');
  assert.equal(serveLogger((await parseServe([])).flags), false);
  assert.deepEqual(serveLogger((await parseServe(['--enable-log-requests'])).flags), { level: 'info' });
  assert.deepEqual(serveLogger((await parseServe(['--uvicorn-log-level', 'debug'])).flags), { level: 'debug' });
  assert.throws(() => serveLogger({ enableLogRequests: true, disableLogRequests: true }), /contradicts/);
});
