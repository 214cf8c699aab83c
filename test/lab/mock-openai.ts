// A small OpenAI-compatible completions server for lab tests: streams fake
// tokens (ids derived from the prompt) with fixed delays.

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MockOptions {
  prefillDelayMs: number;
  tokenDelayMs: number;
  /** Send usage in the last chunk (include_usage). */
  usage?: boolean;
  /** Reports usage.prompt_tokens_details.cached_tokens: (prompt) -> cached tokens. */
  cachedTokens?: (prompt: string | number[]) => number;
  /** Rewrites a generated token: (prompt, index, id) -> id. */
  plant?: (prompt: string | number[], index: number, id: number) => number;
}

export interface MockServer {
  url: string;
  numRequests: number;
  maxInFlight: number;
  prompts: (string | number[])[];
  bodies: Record<string, unknown>[];
  close(): Promise<void>;
}

export function fakeTokenId(prompt: string | number[], index: number): number {
  const s = typeof prompt === 'string' ? prompt : prompt.join(',');
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (Math.imul(h ^ index, 2654435761) >>> 0) % 1000;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startMockServer(opts: MockOptions): Promise<MockServer> {
  let numInFlight = 0;
  const state = { numRequests: 0, maxInFlight: 0, prompts: [] as (string | number[])[], bodies: [] as Record<string, unknown>[] };
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      void (async () => {
        const body = JSON.parse(raw) as { prompt: string | number[]; max_tokens: number; return_token_ids?: boolean };
        state.numRequests++;
        state.prompts.push(body.prompt);
        state.bodies.push(body as Record<string, unknown>);
        numInFlight++;
        state.maxInFlight = Math.max(state.maxInFlight, numInFlight);
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        await sleep(opts.prefillDelayMs);
        for (let i = 0; i < body.max_tokens; i++) {
          if (i > 0) await sleep(opts.tokenDelayMs);
          const id = opts.plant ? opts.plant(body.prompt, i, fakeTokenId(body.prompt, i)) : fakeTokenId(body.prompt, i);
          const choice: Record<string, unknown> = { index: 0, text: ` t${id}`, finish_reason: i === body.max_tokens - 1 ? 'length' : null };
          if (body.return_token_ids) choice['token_ids'] = [id];
          res.write(`data: ${JSON.stringify({ id: 'cmpl', object: 'text_completion', choices: [choice] })}\n\n`);
        }
        if (opts.usage !== false) {
          const numPromptTokens = typeof body.prompt === 'string' ? body.prompt.split(' ').length : body.prompt.length;
          res.write(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: numPromptTokens, completion_tokens: body.max_tokens, ...(opts.cachedTokens ? { prompt_tokens_details: { cached_tokens: opts.cachedTokens(body.prompt) } } : {}) } })}\n\n`);
        }
        res.end('data: [DONE]\n\n');
        numInFlight--;
      })();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return Object.assign(state, {
    url,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  });
}
