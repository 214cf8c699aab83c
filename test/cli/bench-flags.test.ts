// quire bench's flags refuse what they cannot use and say so, naming the flag, with no stack trace: --request-rate and
// --burstiness take positive numbers, --prompt-len and --output-len a positive integer or min:max (a bad value used
// to pass as NaN: a rate dropped silently, prompts of NaN tokens), --concurrency positive integers, --target
// name=url, every target needs a model name, and the other counts and sampling values of serve, offline and decode
// take integers or numbers.

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

test('--target takes name=url, --concurrency positive integers, and every target needs a --model', async () => {
  assert.match(await benchServeError(['--target', 'a', '--model', 'm']),
    /option '--target <name=url>' argument 'a' is invalid\. expected name=value\./);
  assert.match(await benchServeError([...base, '--concurrency', '1,,2']),
    /option '--concurrency <list>' argument '1,,2' is invalid\. expected a comma-separated list of positive integers\./);
  assert.match(await benchServeError(['--target', 'a=http://127.0.0.1:9', '--model', 'b=m', '--workload', 'custom']),
    /quire bench serve: --model: no model name for target "a"/);
});

test('bench offline --dump-prompts is for W1 only', async () => {
  let err = '';
  const offline = benchCommand().commands.find((c) => c.name() === 'offline')!;
  offline.exitOverride().configureOutput({ writeErr: (s) => { err += s; }, writeOut: () => {} });
  await assert.rejects(offline.parseAsync(['--workload', 'w5', '--dump-prompts', '/nonexistent/x.json', '--backend', 'cpu'],
    { from: 'user' }));
  assert.match(err, /quire bench offline: --dump-prompts is only for --workload w1/);
});

test('counts and sampling values: positive integers where a count is meant, numbers where a value is', async () => {
  const errorOf = async (sub: string, argv: string[]): Promise<string> => {
    let err = '';
    const cmd = benchCommand().commands.find((c) => c.name() === sub)!;
    cmd.exitOverride().configureOutput({ writeErr: (s) => { err += s; }, writeOut: () => {} });
    await assert.rejects(cmd.parseAsync(argv, { from: 'user' }));
    return err;
  };
  assert.match(await benchServeError([...base, '--concurrency', '2', '--rounds', '0']),
    /option '--rounds <n>' argument '0' is invalid\. expected a positive integer\./);
  assert.match(await benchServeError([...base, '--concurrency', '2', '--warmup', '-1']),
    /option '--warmup <n>' argument '-1' is invalid\. expected an integer of at least 0\./);
  assert.match(await benchServeError([...base, '--concurrency', '2', '--num-requests', 'many']),
    /option '--num-requests <n>' argument 'many' is invalid\. expected a positive integer\./);
  assert.match(await errorOf('decode', ['--g1', '0']), /option '--g1 <n>' argument '0' is invalid\. expected a positive integer\./);
  assert.match(await errorOf('decode', ['--temperature', 'warm']),
    /option '--temperature <t>' argument 'warm' is invalid\. expected a number\./);
  assert.match(await errorOf('decode', ['--top-k', '2.5']),
    /option '--top-k <k>' argument '2\.5' is invalid\. expected an integer\./);
  assert.match(await errorOf('offline', ['--workload', 'w5', '--suffix-len', 'x']),
    /option '--suffix-len <n>' argument 'x' is invalid\. expected an integer of at least 0\./);
});
