// Starts a server on loopback (port 0) over a FakeEngine and the byte tokenizer.

import type { AddressInfo } from 'node:net';
import { createServer, type QuireServer } from '../../../src/api/server.js';
import type { ServerOptions } from '../../../src/api/options.js';
import { FakeEngine, type FakeEngineOptions } from './fake-engine.js';
import { ByteTokenizer, CHATML_TEMPLATE } from './fake-tokenizer.js';

export const MODEL = 'fake-model';

export interface TestServer {
  url: string;
  server: QuireServer;
  engine: FakeEngine;
  close(): Promise<void>;
}

export async function startTestServer(
  opts: Partial<ServerOptions> = {},
  engineOpts: Partial<FakeEngineOptions> = {},
): Promise<TestServer> {
  const engine = new FakeEngine(engineOpts);
  const server = createServer({
    engine,
    tokenizer: new ByteTokenizer(),
    chatTemplate: CHATML_TEMPLATE,
    modelName: MODEL,
    maxModelLen: 256,
    ...opts,
  });
  server.setReady();
  await server.app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = server.app.server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    engine,
    close: async () => {
      await server.app.close();
      await engine.shutdown();
    },
  };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json };
}

/** Reads an SSE body into its data payloads (strings, `[DONE]` included). */
export async function readSse(res: Response): Promise<string[]> {
  const text = await res.text();
  return text.split('\n\n').filter((f) => f.length > 0).map((f) => {
    if (!f.startsWith('data: ')) throw new Error(`not an SSE data frame: ${JSON.stringify(f)}`);
    return f.slice('data: '.length);
  });
}

export async function scrapeMetrics(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/** The value of one sample, e.g. `quire:num_requests_running` or `quire:request_success_total{finished_reason="stop"}`. */
export function metricValue(text: string, sample: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(sample + ' ')) return Number(line.slice(sample.length + 1));
  }
  return NaN;
}
