// docs/flags.md is what the CLI's commander definitions give (npm run docs:flags writes it), for every command
// `quire --help` lists.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { quireCommands } from '../../src/cli/commands.js';
import { flagDocs } from '../../src/cli/flag-docs.js';

test('docs/flags.md matches the commander definitions (else: npm run docs:flags)', () => {
  const expected = flagDocs(quireCommands());
  const actual = readFileSync('docs/flags.md', 'utf8');
  if (actual !== expected) {
    const a = actual.split('\n');
    const e = expected.split('\n');
    const i = e.findIndex((line, k) => line !== a[k]);
    assert.fail(`docs/flags.md differs from the CLI's definitions from line ${i + 1}:\n  doc: ${a[i]}\n  cli: ${e[i]}\n`
      + 'run: npm run docs:flags');
  }
});

test('the generated page covers every command quire --help lists, and every listed flag of each', () => {
  const help = spawnSync(process.execPath, ['dist/src/cli/main.js', '--help'], { encoding: 'utf8' });
  assert.equal(help.status, 0, help.stderr);
  const listed = [...help.stdout.split('Commands:')[1]!.matchAll(/^ {2}([a-z][\w-]*)/gm)].map((m) => m[1]).filter((n) => n !== 'help');
  assert.deepEqual(quireCommands().map((c) => c.name()).sort(), [...listed].sort());
  const doc = flagDocs(quireCommands());
  const serve = quireCommands().find((c) => c.name() === 'serve')!;
  // hidden options (the --no- halves of boolean pairs, old aliases) are named in the help's footer, not listed
  for (const o of serve.options.filter((x) => !x.hidden)) {
    assert.ok(doc.includes(`\`${o.flags.replaceAll('|', '\\|')}\``), `${o.flags} is in the page`);
  }
});

test('a flag added to a definition changes the page', () => {
  const cmd = new Command('demo').description('a demo').option('--alpha <n>', 'the alpha', '3');
  const before = flagDocs([cmd]);
  cmd.option('--beta', 'the beta | with a pipe');
  const after = flagDocs([cmd]);
  assert.notEqual(before, after);
  assert.match(after, /^\| `--alpha <n>` \| `3` \| the alpha \|$/m);
  assert.match(after, /^\| `--beta` \| {2}\| the beta \\\| with a pipe \|$/m);
});
