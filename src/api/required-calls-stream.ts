// tool_choice "required" streamed as vLLM streams it: the grammar makes the output a JSON list of
// {"name", "parameters"} calls, and each call goes out as soon as its name is whole, then its arguments (the
// parameters' JSON text) as they are written. A character scanner over the list (strings, escapes, nesting); the
// whole-output parse is chat-forced.ts's requiredCalls, which this agrees with on any cut of the text into deltas.

export type RequiredCallEvent = { kind: 'start'; index: number; name: string } | { kind: 'args'; index: number; delta: string };

export class RequiredCallsStream {
  // the JSON text's lexical state
  private depth = 0;
  private inString = false;
  private escape = false;
  // the call object being read (depth 2)
  private key: string | null = null;
  private value: 'name' | 'parameters' | 'other' | null = null;
  /** After a ':' whose value has not begun. */
  private awaiting = false;
  private str = '';
  private capturing = false;
  /** Arguments read before the call's name (sent once it comes). */
  private held = '';
  private started = false;
  private index = 0;

  /** Calls started so far. */
  get callCount(): number {
    return this.index + (this.started ? 1 : 0);
  }

  push(text: string): RequiredCallEvent[] {
    const events: RequiredCallEvent[] = [];
    let args = '';
    const flush = () => {
      if (args === '') return;
      if (this.started) events.push({ kind: 'args', index: this.index, delta: args });
      else this.held += args;
      args = '';
    };
    for (const ch of text) {
      const wasIn = this.inString, d0 = this.depth;
      if (this.inString) {
        if (this.escape) this.escape = false;
        else if (ch === '\\') this.escape = true;
        else if (ch === '"') this.inString = false;
      } else if (ch === '"') this.inString = true;
      else if (ch === '{' || ch === '[') this.depth++;
      else if (ch === '}' || ch === ']') this.depth--;

      if (this.capturing) {
        const primitiveEnd = !wasIn && d0 === 2 && (ch === ',' || ch === '}');
        if (!primitiveEnd) {
          args += ch;
          if (this.depth === 2 && !this.inString && (d0 > 2 || wasIn)) this.capturing = false;  // the value closed
          continue;
        }
        this.capturing = false;
      }
      if (d0 === 1 && ch === '{') {  // a call begins
        this.key = null;
        this.value = null;
        this.awaiting = false;
        this.held = '';
        this.started = false;
        continue;
      }
      if (d0 !== 2) continue;
      if (this.awaiting && this.value === 'parameters' && !/\s/.test(ch)) {
        this.awaiting = false;
        this.capturing = true;
        args += ch;
        if (this.depth === 2 && !this.inString && ch !== '"') this.capturing = ch !== ',' && ch !== '}';
        continue;
      }
      if (wasIn || this.inString) {  // a string of the call object: a key, or the name
        if (!wasIn) {
          this.str = '';
          this.awaiting = false;
        } else if (this.inString) this.str += ch;
        else this.endString(events, flush);
        continue;
      }
      if (ch === ':') {
        this.value = this.key === 'name' ? 'name' : this.key === 'parameters' ? 'parameters' : 'other';
        this.awaiting = true;
      } else if (ch === ',') {
        this.key = null;
        this.value = null;
      } else if (ch === '}') {
        flush();
        if (this.started) this.index++;
        this.started = false;
      }
    }
    flush();
    return events;
  }

  private endString(events: RequiredCallEvent[], flush: () => void): void {
    let s: string;
    try {
      s = JSON.parse(`"${this.str}"`) as string;
    } catch {
      s = this.str;
    }
    if (this.value === null) this.key = s;
    else if (this.value === 'name' && !this.started) {
      flush();
      this.started = true;
      events.push({ kind: 'start', index: this.index, name: s });
      if (this.held !== '') events.push({ kind: 'args', index: this.index, delta: this.held });
      this.held = '';
    }
  }
}
