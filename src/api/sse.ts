// Server-sent events on a raw response: `data: {json}\n\n` frames, ending
// with `data: [DONE]\n\n` whatever happened before (named events without it
// for the Responses API).

import type { ServerResponse } from 'node:http';
import type { OpenAIErrorBody } from './errors.js';

export class SseWriter {
  private ended = false;

  constructor(private readonly res: ServerResponse) {}

  start(): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    this.res.flushHeaders();
  }

  send(obj: unknown): void {
    if (!this.writable) return;
    this.res.write(`data: ${JSON.stringify(obj)}\n\n`);
  }

  /** A named event (`event: type`), as the Responses API streams. */
  sendEvent(type: string, obj: unknown): void {
    if (!this.writable) return;
    this.res.write(`event: ${type}\ndata: ${JSON.stringify(obj)}\n\n`);
  }

  error(body: OpenAIErrorBody): void {
    this.send(body);
  }

  /** Ends the stream; with `doneFrame` (chat and completions) after `data: [DONE]`. */
  done(doneFrame = true): void {
    if (this.ended) return;
    this.ended = true;
    if (this.res.destroyed || this.res.writableEnded) return;
    this.res.end(doneFrame ? 'data: [DONE]\n\n' : undefined);
  }

  get writable(): boolean {
    return !this.ended && !this.res.destroyed && !this.res.writableEnded;
  }
}
