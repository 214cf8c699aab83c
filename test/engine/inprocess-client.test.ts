// The in-process client delivers a step's outputs while the next step runs on the
// device, and applies requests added meanwhile only once that step completes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessEngineClient } from '../../src/engine/inprocess-client.js';
import type { EngineCore, PendingStep } from '../../src/engine/engine-core.js';
import type { EngineOutput, EngineRequest } from '../../src/engine/types.js';
import { defaultSamplingParams } from '../../src/sampling/params.js';

/** Each request gets `numTokens` steps of one token; records the order of events. */
function fakeCore(numTokens: number, log: string[]) {
  const left = new Map<string, number>();
  let step = 0;
  const core = {
    addRequest(r: EngineRequest) { log.push(`add ${r.requestId}`); left.set(r.requestId, numTokens); },
    abortRequest: () => [],
    hasWork: () => left.size > 0,
    beginStep(): PendingStep {
      const n = ++step;
      log.push(`begin ${n}`);
      return { outputs: [], work: { n } as unknown as PendingStep['work'] };
    },
    completeStep(p: PendingStep): EngineOutput[] {
      const n = (p.work as unknown as { n: number }).n;
      log.push(`complete ${n}`);
      const outputs: EngineOutput[] = [];
      for (const [id, k] of left) {
        const finished = k === 1;
        outputs.push({ requestId: id, newTokenIds: [n], finished, ...(finished ? { finishReason: 'length' as const } : {}) });
        if (finished) left.delete(id);
        else left.set(id, k - 1);
      }
      return outputs;
    },
    stats: () => ({}),
    dispose: () => {},
  };
  return core as unknown as EngineCore;
}

const request = (id: string): EngineRequest => ({ requestId: id, promptTokenIds: [1], priority: 0, arrivalTime: 0,
  cacheSalt: null, sampling: defaultSamplingParams({ maxTokens: 3 }) });

test('step n outputs reach consumers after step n+1 is launched and before it completes', async () => {
  const log: string[] = [];
  const client = new InProcessEngineClient(fakeCore(3, log));
  const seen: number[] = [];
  for await (const o of client.generate(request('a'))) {
    log.push(`deliver ${o.newTokenIds[0]}`);
    seen.push(o.newTokenIds[0]!);
  }
  assert.deepEqual(seen, [1, 2, 3]);
  assert.deepEqual(log, ['add a', 'begin 1', 'complete 1', 'begin 2', 'deliver 1', 'complete 2', 'begin 3', 'deliver 2',
    'complete 3', 'deliver 3']);
});

test('a request added while a step is in flight is added once that step completes', async () => {
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
  assert.ok(at('generate b') > at('begin 2') && at('generate b') < at('complete 2'), log.join(', '));
  assert.ok(at('add b') > at('complete 2'), log.join(', '));
});
