// The OpenAI-compatible HTTP server: routes, auth, limits, health, drain.

import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import cors from '@fastify/cors';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { ApiError, toApiError, unauthorized, unavailable } from './errors.js';
import type { ServeContext } from './generation.js';
import { ApiMetrics } from './metrics.js';
import { DEFAULT_CORS, serverLimits, type ServerOptions } from './options.js';
import { registerChat } from './routes/chat.js';
import { registerCompletions } from './routes/completions.js';
import { registerEmbeddings } from './routes/embeddings.js';
import { registerResponses } from './routes/responses.js';
import type { RouteDeps } from './routes/deps.js';
import { registerTokenize } from './routes/tokenize.js';
import { InflightRequests } from './serve.js';
import { QUIRE_VERSION } from '../version.js';

export interface QuireServer {
  app: FastifyInstance;
  metrics: ApiMetrics;
  /** Model loaded: /health answers 200. */
  setReady(): void;
  /** /health and new requests answer 503; running requests get timeoutMs to finish, then are aborted. */
  drain(timeoutMs: number): Promise<void>;
  /** Generation requests in flight. */
  readonly numInflight: number;
}

export type { ServerOptions } from './options.js';

type State = 'loading' | 'ready' | 'draining';

const GENERATION_PATHS = new Set(['/v1/completions', '/v1/chat/completions', '/v1/responses']);
/** The routes that run the engine (refused while loading, draining or failed). */
const ENGINE_PATHS = new Set([...GENERATION_PATHS, '/v1/embeddings']);
const API_NAMES: Record<string, string> = {
  '/v1/completions': 'Completions', '/v1/chat/completions': 'Chat Completions', '/v1/responses': 'Responses',
};

function engineErrorOf(engine: object): string | null {
  const e = (engine as { error?: unknown }).error;
  return typeof e === 'string' ? e : null;
}

function sendError(reply: FastifyReply, err: ApiError): FastifyReply {
  return reply.code(err.statusCode).type('application/json').send(err.toBody());
}

/** Malformed HTTP (before any route runs): an OpenAI error body, then the socket closes. */
function writeClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const e =
    err.code === 'HPE_HEADER_OVERFLOW' ? new ApiError(431, 'Request headers are too large.', 'invalid_request_error', null, 'headers_too_large')
    : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new ApiError(408, 'Request timed out.', 'invalid_request_error', null, 'timeout')
    : new ApiError(400, 'Malformed HTTP request.', 'invalid_request_error', null, 'bad_http');
  const body = JSON.stringify(e.toBody());
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${e.statusCode} ${STATUS_CODES[e.statusCode]}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy();
}

export function createServer(opts: ServerOptions): QuireServer {
  const limits = serverLimits(opts.limits);
  if (opts.enableAutoToolChoice && !opts.toolCallParser) {
    throw new Error('--enable-auto-tool-choice requires --tool-call-parser');
  }
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: limits.bodyLimitBytes,
    http: { maxHeaderSize: limits.maxHeaderBytes },
    return503OnClosing: true,
    clientErrorHandler: writeClientError,
  });
  const metrics = new ApiMetrics(opts.engine);
  const inflight = new InflightRequests();
  const ctx: ServeContext = {
    engine: opts.engine, tokenizer: opts.tokenizer, metrics, engineError: () => engineErrorOf(opts.engine),
  };
  const deps: RouteDeps = {
    ctx, tokenizer: opts.tokenizer, inflight, limits,
    modelName: opts.modelName,
    servedModelNames: [opts.modelName, ...(opts.servedModelNames ?? []).filter((n) => n !== opts.modelName)],
    maxModelLen: opts.maxModelLen,
    chatTemplate: opts.chatTemplate,
    allowRequestChatTemplate: opts.allowRequestChatTemplate ?? false,
    autoToolParser: opts.enableAutoToolChoice ? opts.toolCallParser ?? null : null,
    reasoningParser: opts.reasoningParser ?? null,
    bosToken: opts.bosToken ?? null,
    eosToken: opts.eosToken ?? null,
    samplingDefaults: opts.samplingDefaults ?? {},
    returnTokensAsTokenIds: opts.returnTokensAsTokenIds ?? false,
    pooler: opts.pooler ?? null,
    hiddenSize: opts.hiddenSize ?? null,
  };
  let state: State = 'loading';

  app.setErrorHandler((err, request, reply) => {
    const e = toApiError(err);
    if (e.statusCode >= 500) request.log.error({ err }, 'request failed');
    return sendError(reply, e);
  });
  app.setNotFoundHandler((request, reply) =>
    sendError(reply, new ApiError(404, `No route for ${request.method} ${request.url}.`, 'not_found_error', null, 'not_found')));

  // Browsers ask before they send (CORS preflight, no credentials): vLLM's defaults, every origin allowed.
  const c = opts.cors ?? DEFAULT_CORS;
  void app.register(cors, {
    origin: c.allowedOrigins.includes('*') ? '*' : c.allowedOrigins,
    methods: c.allowedMethods.includes('*') ? ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] : c.allowedMethods,
    ...(c.allowedHeaders.includes('*') ? {} : { allowedHeaders: c.allowedHeaders }),
    credentials: c.allowCredentials,
  });

  app.addHook('onRequest', async (request: FastifyRequest) => {
    const path = request.url.split('?')[0]!;
    const isV1 = path.startsWith('/v1/');
    // A preflight carries no Authorization (vLLM lets OPTIONS through too).
    if (opts.apiKey !== undefined && isV1 && request.method !== 'OPTIONS' && request.headers.authorization !== `Bearer ${opts.apiKey}`) {
      throw unauthorized();
    }
    if (request.method === 'POST' && GENERATION_PATHS.has(path) && deps.pooler !== null) {
      throw new ApiError(400, `The model is served for embeddings (--runner pooling): it does not support the ${API_NAMES[path]} API.`);
    }
    if (request.method === 'POST' && ENGINE_PATHS.has(path)) {
      if (state === 'draining') throw unavailable('The server is shutting down.');
      const failure = engineErrorOf(opts.engine);
      if (failure !== null) throw unavailable(`The engine failed: ${failure}`);
      if (state === 'loading') throw unavailable('The model is still loading.');
    }
  });

  const health = async (_request: FastifyRequest, reply: FastifyReply) => {
    const failure = engineErrorOf(opts.engine);
    if (state === 'ready' && failure === null) return reply.code(200).send({ status: 'ok' });
    const status = failure !== null ? 'engine_failed' : state;
    return reply.code(503).send({ status, ...(failure !== null ? { error: failure } : {}) });
  };
  app.get('/health', health);
  // vLLM's /ping (SageMaker's health check, GET or POST) answers as /health.
  app.get('/ping', health);
  app.post('/ping', health);
  app.get('/version', async () => ({ version: QUIRE_VERSION }));
  app.get('/metrics', async (_request, reply) => reply.type(metrics.contentType).send(await metrics.text()));

  registerCompletions(app, deps);
  registerChat(app, deps);
  registerResponses(app, deps);
  registerTokenize(app, deps);
  registerEmbeddings(app, deps);

  return {
    app,
    metrics,
    setReady() {
      if (state === 'loading') state = 'ready';
    },
    async drain(timeoutMs: number) {
      state = 'draining';
      if (!(await inflight.waitIdle(timeoutMs))) {
        inflight.abortAll();
        await inflight.waitIdle(Math.max(1000, timeoutMs));
      }
    },
    get numInflight() {
      return inflight.size;
    },
  };
}
