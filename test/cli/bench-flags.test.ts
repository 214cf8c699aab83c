// quire bench's flags refuse what they cannot use and say so, naming the flag, with no stack trace: --request-rate and
// --burstiness take positive numbers, --prompt-len and --output-len a positive integer or min:max (a bad value used
// to pass as NaN: a rate dropped silently, prompts of NaN tokens), --concurrency positive integers, --target
// name=url, every target needs a model name, and the other counts and sampling values of serve, offline and decode
// take integers or numbers.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { benchCommand } from '../../src/cli/bench.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

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
  assert.match(await errorOf('decode', ['--context-lens', '128,4k']), /option '--context-lens <list>' argument '128,4k' is invalid\. expected a comma-separated list of positive integers\./);
  assert.match(await errorOf('decode', ['--g1', '0']), /option '--g1 <n>' argument '0' is invalid\. expected a positive integer\./);
  {
    // --prompt-file: refused before any model loads, naming the file and line
    const decode = () => benchCommand().commands.find((c) => c.name() === 'decode')!.exitOverride();
    const bad = join(mkdtempSync(join(tmpdir(), 'quire-prompts-')), 'p.jsonl');
    writeFileSync(bad, '{"prompt": "ok"}\n{prompt\n');
    await assert.rejects(decode().parseAsync(['--prompt-file', bad, '--context-lens', '128'], { from: 'user' }), /--prompt-file and --context-lens exclude each other/);
    await assert.rejects(decode().parseAsync(['--prompt-file', bad, '--model', '/no/such/model'], { from: 'user' }), /--prompt-file .*p\.jsonl:2: not JSON/);
    rmSync(dirname(bad), { recursive: true, force: true });
  }
  assert.match(await errorOf('decode', ['--temperature', 'warm']),
    /option '--temperature <t>' argument 'warm' is invalid\. expected a number\./);
  assert.match(await errorOf('decode', ['--top-k', '2.5']),
    /option '--top-k <k>' argument '2\.5' is invalid\. expected an integer\./);
  assert.match(await errorOf('offline', ['--workload', 'w5', '--suffix-len', 'x']),
    /option '--suffix-len <n>' argument 'x' is invalid\. expected an integer of at least 0\./);
});

test('bench serve: every list flag is honoured or refused: custom --concurrency 1,4 runs both levels', async () => {
  const { workloadFromFlags, workloadFlagError } = await import('../../src/cli/bench-serve.js');
  const parse = async (argv: string[]): Promise<Record<string, unknown>> => {
    let flags: Record<string, unknown> = {};
    const serve = benchCommand().commands.find((c) => c.name() === 'serve')!;
    serve.exitOverride().action((f: Record<string, unknown>) => { flags = f; });
    await serve.parseAsync(['--target', 'a=http://127.0.0.1:9', '--model', 'm', ...argv], { from: 'user' });
    return flags;
  };
  const custom = await parse(['--workload', 'custom', '--concurrency', '1,4', '--num-requests', '8']);
  assert.equal(workloadFlagError(custom), null);
  const w = workloadFromFlags(custom);
  assert.deepEqual(w.levels.map((l) => [l.name, l.concurrency, l.requests.length]), [['c1', 1, 8], ['c4', 4, 8]]);
  assert.match(w.description, /8 requests per level, concurrency 1\/4/);
  for (const [argv, message] of [
    [['--workload', 'w3', '--num-requests', '8'], /--num-requests does not apply to --workload w3/],
    [['--workload', 'w3', '--prompt-len', '8:16'], /--prompt-len: --workload w3 takes one length, not a min:max range/],
    [['--workload', 'w3', '--request-rate', '2'], /--request-rate does not apply to --workload w3/],
    [['--workload', 'w5', '--concurrency', '1,4'], /--workload w5 runs one level: give one concurrency/],
    [['--workload', 'w5', '--prompt-len', '64'], /--prompt-len does not apply to --workload w5/],
    [['--workload', 'w3', '--no-ignore-eos'], /--no-ignore-eos does not apply to --workload w3/],
  ] as const) {
    assert.match(workloadFlagError(await parse([...argv])) ?? '', message, argv.join(' '));
  }
  const w5 = workloadFromFlags(await parse(['--workload', 'w5', '--concurrency', '4', '--output-len', '8']));
  assert.deepEqual([w5.levels[0]!.concurrency, w5.levels[0]!.requests[0]!.maxTokens], [4, 8], 'w5 takes --concurrency and --output-len');
});

test('bench serve: text prompts are sized in the server\'s tokens; a long run is announced with a shorter one', async () => {
  const { workloadFromFlags, estimateLines } = await import('../../src/cli/bench-serve.js');
  const { wordsForTokens } = await import('../../src/lab/probe.js');
  // a tokenizer of 1.1 tokens a word and a BOS: 64 tokens are 57 words
  const speed = { target: 'a', tokensPerWord: 1.1, offsetTokens: 1, prefillTokensPerS: 500, decodeTokensPerS: 20 };
  assert.equal(wordsForTokens(64, speed), 57);
  const flags = { workload: 'custom', concurrency: [1], numRequests: 2, promptLen: 64, outputLen: 4, promptFormat: 'text',
    vocabSize: 32000, nonce: true, ignoreEos: true };
  const w = workloadFromFlags(flags, (n) => wordsForTokens(n, speed));
  assert.equal((w.levels[0]!.requests[0]!.prompt as string).split(' ').length, 57);
  const w3 = workloadFromFlags({ ...flags, workload: 'w3', concurrency: undefined, numRequests: undefined, promptLen: undefined,
    outputLen: undefined });
  const lines = estimateLines(w3, 2, [speed]);
  assert.match(lines[0]!, /bench serve: W3 .*3424 requests over 2 round\(s\) and 1 target\(s\)/);
  assert.match(lines[1] ?? '', /warning: this run will take at least \d+(\.\d)? h on these servers\. For a first look, try a small one: --workload custom/);
  const small = workloadFromFlags(flags);
  assert.equal(estimateLines(small, 1, [speed]).length, 1, 'a short run: no warning');
});
