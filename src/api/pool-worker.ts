// A worker of the server's worker pool (worker-pool.ts): runs the work a request brings that may take long, trap or
// recurse without end, away from the event loop: compiling a structured output's grammar (xgrammar's WebAssembly,
// against the model's vocabulary when the pool has it) and rendering a chat template the request sent. The pool
// kills this thread when a task overruns its time limit, and replaces it after a trap, so each worker's xgrammar
// instance has only ever seen inputs that compiled cleanly.

import { parentPort, workerData } from 'node:worker_threads';
import type * as XG from '@mlc-ai/web-xgrammar';
import { ChatTemplateError, renderChat } from '../loader/chat-template.js';
import {
  checkStructuredOutput, compileSpec, createGrammarCompiler, GrammarCompileError, readGrammarVocab,
} from '../sampling/structured-output.js';
import type { PoolTask, PoolWorkerData, PoolWorkerMessage, TaskResult } from './worker-pool.js';

const port = parentPort!;
const init = workerData as PoolWorkerData;
let compiler: Promise<XG.GrammarCompiler> | null = null;

function compilerOnce(): Promise<XG.GrammarCompiler> | null {
  const v = init.grammarVocab;
  if (v === null) return null;
  compiler ??= createGrammarCompiler(readGrammarVocab(v));
  return compiler;
}

async function run(task: PoolTask): Promise<TaskResult> {
  switch (task.kind) {
    case 'grammar':
      try {
        const c = compilerOnce();
        if (c === null) await checkStructuredOutput(task.spec);
        else (await compileSpec(await c, task.spec)).dispose();
        return { ok: true };
      } catch (e) {
        if (e instanceof GrammarCompileError) return { ok: false, reason: e.reason, trapped: e.trapped };
        return { ok: false, reason: null, trapped: true };
      }
    case 'template':
      try {
        return { ok: true, text: renderChat(task.template, task.messages, task.options) };
      } catch (e) {
        if (e instanceof ChatTemplateError) return { ok: false, reason: e.message, trapped: false };
        return { ok: false, reason: null, trapped: true };
      }
  }
}

port.on('message', (m: { id: number; task: PoolTask }) => {
  void run(m.task).then((result) => port.postMessage({ type: 'done', id: m.id, result } satisfies PoolWorkerMessage));
});

// The compiler over the vocabulary is built before the first task, so that its cost is not counted in a time limit.
void (async () => {
  try {
    await compilerOnce();
    port.postMessage({ type: 'ready' } satisfies PoolWorkerMessage);
  } catch (e) {
    port.postMessage({ type: 'broken', message: (e as Error).message } satisfies PoolWorkerMessage);
  }
})();
