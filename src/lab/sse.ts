// Incremental Server-Sent Events parser: bytes arrive in arbitrary chunks;
// an event ends at a blank line; `data:` lines of one event join with '\n'.

export interface SseEvent {
  event: string;
  data: string;
}

export class SseParser {
  private buffer = '';
  private dataLines: string[] = [];
  private eventName = 'message';
  private readonly decoder = new TextDecoder();

  /** Feeds a chunk; returns the events it completed. */
  push(chunk: Uint8Array | string): SseEvent[] {
    this.buffer += typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    const events: SseEvent[] = [];
    for (;;) {
      const nl = this.buffer.search(/\r\n|\r|\n/);
      if (nl < 0) break;
      // A lone '\r' at the end may be the first half of '\r\n': wait for more.
      if (this.buffer[nl] === '\r' && nl === this.buffer.length - 1) break;
      const width = this.buffer.startsWith('\r\n', nl) ? 2 : 1;
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + width);
      const ev = this.line(line);
      if (ev) events.push(ev);
    }
    return events;
  }

  /** Flushes an event left open when the stream ended without a blank line. */
  end(): SseEvent[] {
    const rest = this.buffer;
    this.buffer = '';
    const events: SseEvent[] = [];
    if (rest.length > 0) {
      const ev = this.line(rest);
      if (ev) events.push(ev);
    }
    const ev = this.line('');
    if (ev) events.push(ev);
    return events;
  }

  private line(line: string): SseEvent | null {
    if (line === '') {
      if (this.dataLines.length === 0) {
        this.eventName = 'message';
        return null;
      }
      const ev = { event: this.eventName, data: this.dataLines.join('\n') };
      this.dataLines = [];
      this.eventName = 'message';
      return ev;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.dataLines.push(value);
    else if (field === 'event') this.eventName = value;
    return null;
  }
}
