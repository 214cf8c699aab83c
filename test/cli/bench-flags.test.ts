// quire bench serve's number flags refuse what they cannot use and say so, naming the flag: --request-rate and
// --burstiness take positive numbers, --prompt-len and --output-len a positive integer or min:max (a bad value used
// to pass as NaN: a rate dropped silently, prompts of NaN tokens).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchCommand } from '../../src/cli/bench.js';

async function benchServeError(argv: string[]): Promise<string> {
  let err = '';
  const serve = benchCommand().commands.find((c) => c.name() === 'serve')!;
  serve.exitOverride().configureOutput({ writeErr: (s) => { err += s; }, writeOut: () => {} });
  await assert.rejects(serve.parseAsync(argv, { from: 'user' }));
  return err;
}

const base = ['--target', 'a=http://127.0.0.1:9', '--model', 'm', '--workload', 'custom'];

test('--request-rate takes a positive number', async () => {
  for (const bad of ['abc', '0', '-3', 'Infinity']) {
    const err = await benchServeError([...base, '--request-rate', bad]);
    assert.match(err, new RegExp(`option '--request-rate <r>' argument '${bad}' is invalid\\. expected a positive number`));
  }
});

test('--burstiness takes a positive number', async () => {
  const err = await benchServeError([...base, '--request-rate', '4', '--burstiness', 'x']);
  assert.match(err, /option '--burstiness <b>' argument 'x' is invalid\. expected a positive number/);
});

test('--prompt-len and --output-len take n or min:max of positive integers', async () => {
  for (const [flag, bad] of [['--prompt-len', 'abc'], ['--prompt-len', '0'], ['--output-len', '9:3'], ['--output-len', '1:2:3'],
    ['--output-len', '2.5']] as const) {
    const err = await benchServeError([...base, '--concurrency', '2', flag, bad]);
    assert.match(err, new RegExp(`option '${flag} <n\\|min:max>' argument '${bad}' is invalid\\. expected a positive integer n, or min:max`));
  }
});
