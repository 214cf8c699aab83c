// A stand-in for llama.cpp v0.5.0's llama-server: POST /completion answered in the shape of its
// server_task_result_cmpl_final::to_json_non_oaicompat (tools/server/server-task.cpp) and GET /props.
// The test supplies the "model": the greedy tokens and each step's top list for a prompt.

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeStep {
  id: number;
  /** The step's top list, most likely first, as (id, logprob). */
  top: { id: number; logprob: number }[];
}

export interface FakeLlamaServer {
  url: string;
  bodies: Record<string, unknown>[];
  close(): Promise<void>;
}

const piece = (id: number): string => `<t${id}>`;
const bytes = (s: string): number[] => [...Buffer.from(s, 'utf8')];

/** A /completion response exactly as v0.5.0 writes it (non-streamed, n_probs > 0, post_sampling_probs false). */
export function llamaCppResponse(body: Record<string, unknown>, steps: FakeStep[]): Record<string, unknown> {
  const nPredict = body.n_predict as number;
  return {
    index: 0,
    content: steps.map((s) => piece(s.id)).join(''),
    tokens: body.return_tokens ? steps.map((s) => s.id) : [],
    id_slot: 0,
    stop: true,
    model: 'tq.gguf',
    tokens_predicted: steps.length,
    tokens_evaluated: (body.prompt as number[]).length,
    generation_settings: { n_predict: nPredict, seed: 4294967295, temperature: 0, n_probs: body.n_probs, samplers: body.samplers,
      ignore_eos: body.ignore_eos, post_sampling_probs: body.post_sampling_probs },
    prompt: (body.prompt as number[]).map(piece).join(''),
    has_new_line: false,
    truncated: false,
    stop_type: steps.length === nPredict ? 'limit' : 'eos',
    stopping_word: '',
    tokens_cached: 0,
    timings: { cache_n: 0, prompt_n: (body.prompt as number[]).length, prompt_ms: 1.5, predicted_n: steps.length, predicted_ms: 3.2 },
    completion_probabilities: steps.map((s) => ({
      id: s.id, token: piece(s.id), bytes: bytes(piece(s.id)),
      logprob: s.top.find((t) => t.id === s.id)?.logprob ?? -3.4028234663852886e38,
      top_logprobs: s.top.map((t) => ({ id: t.id, token: piece(t.id), bytes: bytes(piece(t.id)), logprob: t.logprob })),
    })),
  };
}

/**
 * Serves /completion with `answer(body)`: a JSON body (status 200) or `{ status, body }`. Records each request body.
 */
export async function startFakeLlamaServer(
  answer: (body: Record<string, unknown>) => Promise<unknown> | unknown,
): Promise<FakeLlamaServer> {
  const bodies: Record<string, unknown>[] = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => { raw += c.toString('utf8'); });
    req.on('end', () => {
      void (async () => {
        const send = (status: number, obj: unknown) => {
          res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
          res.end(JSON.stringify(obj));
        };
        if (req.method === 'GET' && req.url === '/props') {
          send(200, { build_info: 'b0-v0.5.0', model_path: '/tmp/tq.gguf', total_slots: 1, default_generation_settings: {} });
          return;
        }
        if (req.method !== 'POST' || req.url !== '/completion') {
          send(404, { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } });
          return;
        }
        const body = JSON.parse(raw) as Record<string, unknown>;
        bodies.push(body);
        try {
          const a = await answer(body);
          if (typeof a === 'object' && a !== null && 'status' in a && 'body' in a) send((a as { status: number }).status, (a as { body: unknown }).body);
          else send(200, a);
        } catch (err) {
          send(500, { error: { code: 500, message: String(err), type: 'server_error' } });
        }
      })();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    bodies,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
