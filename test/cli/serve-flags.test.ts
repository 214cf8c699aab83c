// quire serve's tool-calling flags are checked before anything loads, with vLLM's names.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serveCommand } from '../../src/cli/serve.js';
import { emptyStats } from '../../src/engine/stats.js';

async function serveError(argv: string[]): Promise<string> {
  let err = '';
  const cmd = serveCommand().exitOverride().configureOutput({ writeErr: (s) => { err += s; }, writeOut: () => {} });
  await assert.rejects(cmd.parseAsync(argv, { from: 'user' }));
  return err;
}

test('--enable-auto-tool-choice without --tool-call-parser is refused, naming both flags', async () => {
  const err = await serveError(['--model', '/nonexistent', '--enable-auto-tool-choice']);
  assert.match(err, /--enable-auto-tool-choice requires --tool-call-parser \(one of: hermes, llama3_json, mistral\)/);
});

test('--tool-call-parser takes only the parsers Quire has', async () => {
  const err = await serveError(['--model', '/nonexistent', '--tool-call-parser', 'pythonic']);
  assert.match(err, /argument 'pythonic' is invalid.*hermes, llama3_json, mistral/s);
});

test('--reasoning-parser takes qwen3 or deepseek_r1', async () => {
  const err = await serveError(['--model', '/nonexistent', '--reasoning-parser', 'granite']);
  assert.match(err, /argument 'granite' is invalid.*qwen3, deepseek_r1/s);
});

test('the CORS flags take JSON lists, and say so otherwise', async () => {
  const err = await serveError(['--model', '/nonexistent', '--allowed-origins', 'https://a.example']);
  assert.match(err, /--allowed-origins takes a JSON list of strings/);
});

test('--chat-template names a missing file before anything loads', async () => {
  const err = await serveError(['--model', '/nonexistent', '--chat-template', '/no/such/template.jinja']);
  assert.match(err, /--chat-template \/no\/such\/template\.jinja: looks like a file path, but there is no such file/);
});

test('--override-generation-config takes a JSON object of sampling fields, checked before anything loads', async () => {
  assert.match(await serveError(['--model', '/nonexistent', '--override-generation-config', '{"temp": 1}']),
    /--override-generation-config: "temp" is not one of temperature, top_p, top_k, min_p, repetition_penalty/);
  assert.match(await serveError(['--model', '/nonexistent', '--override-generation-config', '0.5']), /takes a JSON object/);
});

test('the model as vLLM takes it, a positional argument; given twice, two different ones are refused', async () => {
  assert.match(await serveError(['/models/a', '--model', '/models/b']), /the model is given twice: \/models\/a and --model \/models\/b/);
  const cmd = serveCommand().exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
  await assert.rejects(cmd.parseAsync(['/no/such/model', '--port', '0'], { from: 'user' }), /\/no\/such\/model/);
});

test('--max-logprobs takes an integer >= -1', async () => {
  const { maxLogprobsArg, servedMaxLogprobs } = await import('../../src/cli/serve.js');
  assert.equal(servedMaxLogprobs(maxLogprobsArg('5'), 151_936), 5);
  assert.equal(servedMaxLogprobs(maxLogprobsArg('-1'), 151_936), 151_936);
  const err = await serveError(['--model', '/nonexistent', '--max-logprobs', '2.5']);
  assert.match(err, /--max-logprobs takes an integer >= 0, or -1/);
});

test('--disable-log-stats: no stats logger; without it one starts and reads the engine at once', async () => {
  const { serveStatsLogger } = await import('../../src/cli/serve.js');
  let reads = 0;
  const engine = { stats: () => { reads++; return emptyStats(); } };
  const parsed = (argv: string[]): Record<string, unknown> => {
    const cmd = serveCommand().exitOverride();
    cmd.parseOptions(argv);
    return cmd.opts();
  };
  assert.equal(serveStatsLogger(parsed(['--disable-log-stats']), engine, () => {}), null);
  assert.equal(reads, 0);
  const logger = serveStatsLogger(parsed([]), engine, () => {});
  assert.ok(logger);
  logger.stop();
  assert.equal(reads, 1);
});

test('vLLM\'s runner flags: --runner pooling, --task embed and --convert embed ask for embeddings; contradictions are refused', async () => {
  const { poolingRunner } = await import('../../src/cli/serve.js');
  assert.equal(poolingRunner({ runner: 'pooling' }), true);
  assert.equal(poolingRunner({ task: 'embed' }), true);
  assert.equal(poolingRunner({ convert: 'embed' }), true);
  assert.equal(poolingRunner({}), false);
  assert.match(await serveError(['--model', '/nonexistent', '--runner', 'generate', '--task', 'embed']), /--runner generate contradicts --task embed/);
  assert.match(await serveError(['--model', '/nonexistent', '--runner', 'pooling', '--task', 'generate']), /--runner pooling contradicts --task generate/);
  assert.match(await serveError(['--model', '/nonexistent', '--pooler-config', '{"normalize": false}']), /--pooler-config needs --runner pooling/);
  assert.match(await serveError(['--model', '/nonexistent', '--task', 'embed', '--pooler-config', '[1]']), /--pooler-config takes a JSON object/);
});

test('issue 38: --port, --shutdown-timeout and --api-key are checked before anything loads', async () => {
  assert.match(await serveError(['--model', '/nonexistent', '--port', '99999']), /--port takes an integer from 0 to 65535, got "99999"/);
  assert.match(await serveError(['--model', '/nonexistent', '--shutdown-timeout', 'abc']), /--shutdown-timeout takes a number of seconds >= 0/);
  assert.match(await serveError(['--model', '/nonexistent', '--shutdown-timeout', '-5']), /--shutdown-timeout takes a number of seconds >= 0/);
  assert.match(await serveError(['--model', '/nonexistent', '--api-key', '']), /--api-key must not be empty/);
  assert.match(await serveError(['--model', '/nonexistent', '--max-messages', '0']), /--max-messages takes an integer >= 1/);
  assert.match(await serveError(['--model', '/nonexistent', '--grammar-compile-timeout', '0']), /--grammar-compile-timeout takes a number of seconds > 0/);
});

test('issue 38: the limit flags reach the server limits; a KV cache under one --max-model-len sequence is refused', async () => {
  const { limitsFromFlags, kvCacheRefusal } = await import('../../src/cli/serve-limits.js');
  let flags: Record<string, unknown> = {};
  const cmd = serveCommand().exitOverride().action((_m, f: Record<string, unknown>) => { flags = f; });
  await cmd.parseAsync(['/m', '--max-tools', '3', '--grammar-compile-timeout', '1.5', '--max-prompt-chars', '100'], { from: 'user' });
  const l = limitsFromFlags(flags);
  assert.equal(l.maxTools, 3);
  assert.equal(l.grammarCompileTimeoutMs, 1500);
  assert.equal(l.maxPromptChars, 100);
  assert.equal(l.maxMessages, 2048);
  assert.equal(kvCacheRefusal(2048, 2048), null);
  assert.match(kvCacheRefusal(176, 2048)!, /holds 176 tokens, less than one sequence of --max-model-len 2048: raise --kv-cache-memory .* lower --max-model-len to at most 176/);
});

test('--data-parallel-size / -dp: a positive integer (default 1) into the engine options; 0, -1 and x are CLI errors naming the flag', async () => {
  const { vllmShortFlags } = await import('../../src/cli/engine-flags.js');
  const { serveEngineOptions } = await import('../../src/cli/serve.js');
  const parsed = async (argv: string[]) => {
    let flags: Record<string, unknown> = {};
    const cmd = serveCommand().exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    cmd.action((_m: unknown, f: Record<string, unknown>) => { flags = f; });
    await cmd.parseAsync(vllmShortFlags(argv), { from: 'user' });
    return serveEngineOptions(flags);
  };
  assert.equal((await parsed(['--model', '/m'])).dataParallelSize, 1);
  assert.equal((await parsed(['--model', '/m', '--data-parallel-size', '2'])).dataParallelSize, 2);
  assert.equal((await parsed(['--model', '/m', '-dp', '4'])).dataParallelSize, 4);
  assert.equal((await parsed(['--model', '/m', '-dp', '4'])).deviceOrdinal, 0);
  for (const bad of ['0', '-1', 'x', '1.5']) {
    const err = await serveError(vllmShortFlags(['--model', '/nonexistent', '-dp', bad]));
    assert.match(err, new RegExp(`'--data-parallel-size <n>' argument '${bad.replace('.', '\\.')}' is invalid\\. expected a positive integer`), bad);
  }
});

test('a data-parallel replica that fails ends quire serve, with a message naming the replica', async () => {
  const { stopOnReplicaFailure } = await import('../../src/cli/serve.js');
  const { DataParallelClient } = await import('../../src/engine/data-parallel-client.js');
  const { OutputRouter } = await import('../../src/engine/output-stream.js');
  const replica = () => ({
    info: { backend: 'cpu' as const, device: 'cpu', numBlocks: 10, numStateSlots: 0, bytesPerStateSlot: 0, numCachedStateSlots: 0,
      blockSize: 16, maxModelLen: 64, vocabSize: 100, loadMs: 0, weightBytesPerStep: 0, kvBytesPerToken: 0,
      maxNumBatchedTokens: 64, maxNumSeqs: 4 },
    error: null, onOutputs: null, onFailure: null as ((m: string) => void) | null, router: new OutputRouter(),
    generate(req: { requestId: string }) { return this.router.open(req.requestId); },
    abort() {}, stats: emptyStats, fail(m: string) { this.onFailure?.(m); }, probe: async () => null,
    shutdown: async () => {}, shutdownWithTrace: async () => null,
  });
  const replicas = [replica(), replica()];
  const dp = new DataParallelClient(replicas, { enablePrefixCaching: true });
  const logged: string[] = [];
  let stopped = 0;
  // the watchdog's exit is this test's no-op (the real one ends the process 5 s on, whatever stop() waits for)
  stopOnReplicaFailure(dp, (line) => logged.push(line), async () => { stopped++; }, () => {});
  replicas[1]!.fail('data-parallel replica 1 failed: engine worker exited with code 1');
  assert.equal(stopped, 1);
  assert.deepEqual(logged, ['quire serve: data-parallel replica 1 failed: engine worker exited with code 1; the data-parallel '
    + 'engine has stopped, and the server with it']);
});
