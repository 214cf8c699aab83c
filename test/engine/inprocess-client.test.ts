// The in-process client runs EngineCore.advance() turn after turn: a turn returns the outputs of the step the
// previous turn launched (the next one now runs on the device), and they reach their consumers before the next
// turn; requests added meanwhile go to the core at once, for the next turn to schedule.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessEngineClient } from '../../src/engine/inprocess-client.js';
import type { EngineCore } from '../../src/engine/engine-core.js';
import type { EngineOutput, EngineRequest } from '../../src/engine/types.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';

/** Turn n launches step n and returns step n - 1's outputs: one token per request, `numTokens` each. */
function fakeCore(numTokens: number, log: string[]) {
  const left = new Map<string, number>();
  let turn = 0;
  let launched: string[] = [];
  const core = {
    addRequest(r: EngineRequest) { log.push(`add ${r.requestId}`); left.set(r.requestId, numTokens); },
    abortRequest: () => [],
    hasWork: () => left.size > 0,
    advance(): EngineOutput[] {
      const n = ++turn;
      log.push(`advance ${n}`);
      const outputs: EngineOutput[] = [];
      for (const id of launched) {
        const k = left.get(id)!;
        const finished = k === 1;
        outputs.push({ requestId: id, newTokenIds: [n - 1], finished, ...(finished ? { finishReason: 'length' as const } : {}) });
        if (finished) left.delete(id);
        else left.set(id, k - 1);
      }
      launched = [...left.keys()];
      return outputs;
    },
    stats: () => ({}),
    dispose: () => {},
  };
  return core as unknown as EngineCore;
}

const request = (id: string): EngineRequest => ({ requestId: id, promptTokenIds: [1], priority: 0, arrivalTime: 0,
  cacheSalt: null, sampling: defaultSamplingParams({ maxTokens: 3 }) });

test('a turn\'s outputs reach their consumers before the next turn', async () => {
  const log: string[] = [];
  const client = new InProcessEngineClient(fakeCore(3, log));
  const seen: number[] = [];
  for await (const o of client.generate(request('a'))) {
    log.push(`deliver ${o.newTokenIds[0]}`);
    seen.push(o.newTokenIds[0]!);
  }
  assert.deepEqual(seen, [1, 2, 3]);
  assert.deepEqual(log, ['add a', 'advance 1', 'advance 2', 'deliver 1', 'advance 3', 'deliver 2', 'advance 4',
    'deliver 3']);
});

test('a request added by a consumer reaches the core before the next turn', async () => {
  const log: string[] = [];
  const client = new InProcessEngineClient(fakeCore(2, log));
  let second: Promise<unknown> | null = null;
  for await (const o of client.generate(request('a'))) {
    if (!second) {
      log.push('generate b');
      second = (async () => { for await (const _ of client.generate(request('b'))) { /* drain */ } })();
    }
    void o;
  }
  await second;
  const at = (e: string) => log.indexOf(e);
  assert.equal(at('add b'), at('generate b') + 1, log.join(', '));
  assert.ok(at('add b') < at('advance 3'), log.join(', '));
});
