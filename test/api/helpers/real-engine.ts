// The real engine (worker thread, CPU backend) over a tiny random-weight model, and a server listening on loopback.

import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { QuireServer } from '../../../src/api/server.js';
import { engineOptions } from '../../../src/engine/options.js';
import { WorkerEngineClient } from '../../../src/engine/worker-client.js';
import { loadModelDir, type ModelDir } from '../../../src/loader/model-dir.js';
import { makeTestModel } from '../../../src/tools/make-test-model.js';

export interface TinyEngine {
  dir: string;
  model: ModelDir;
  engine: WorkerEngineClient;
  /** Shuts the engine down and removes the model directory. */
  dispose(): Promise<void>;
}

/** A tiny-qwen3 (f32, `seed`) served by the real engine on the CPU with an 8 MiB KV cache. */
export async function startTinyEngine(seed: number, maxModelLen: number): Promise<TinyEngine> {
  const dir = mkdtempSync(join(tmpdir(), 'quire-api-'));
  await makeTestModel({ shape: 'tiny-qwen3', outDir: dir, dtype: 'f32', seed });
  const engine = await WorkerEngineClient.start(engineOptions({ model: dir, backend: 'cpu', maxModelLen, kvCacheBytes: 8 * 1024 * 1024 }));
  return {
    dir, model: loadModelDir(dir), engine,
    async dispose() {
      await engine.shutdown();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Marks the server ready and listens on a loopback port; returns its base URL. */
export async function listenOnLoopback(server: QuireServer): Promise<string> {
  server.setReady();
  await server.app.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(server.app.server.address() as AddressInfo).port}`;
}
