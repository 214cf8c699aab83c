// The engine's grammar hosts (grammar-host.ts): worker threads that compile structured outputs' grammars and hold the
// matchers made from them, so that the engine thread never compiles, and never waits on a compile.
//
// - A matcher lives in the xgrammar instance that compiled its grammar (the WebAssembly build cannot move a compiled
//   grammar), and the engine waits on a host each step for a matcher's mask. So a host is sent compiles only while
//   it holds no matcher and has none promised: compiles sent to an idle host together go first, the matchers after.
//   A host keeps its compiled grammars (up to maxGrammarsPerHost, least recently used dropped): a request whose
//   grammar a host has gets its matcher there at once, whatever else the host holds.
// - A grammar no host has goes to an idle host, or a new one up to maxHosts (each holds the vocabulary: some 120 MB
//   for a 151k-token one). With none, it waits, and the host with the fewest matchers drains (takes no more
//   requests) until it is idle, so that no grammar waits for ever. A request not yet matched is not scheduled.
// - A host that traps, crashes or does not answer a mask within maskWaitMs is ended: the requests holding its
//   matchers fail (with a message that shows nothing of its memory), those waiting on it are placed again, and a
//   later grammar gets a fresh host. A compile no request waits for any more (all aborted) ends its host; so does
//   close(), at once, whatever is compiling.

import { Worker } from 'node:worker_threads';
import {
  GrammarCompileError, type GrammarVocab, type GrammarVocabFile, type StructuredOutputSpec, type TokenConstraint,
} from './structured-output.js';
import { HostedConstraint, HOST_FAILED, newChannel, newDoorbell } from './grammar-channel.js';
import type { FromHost, GrammarHostInit, ToHost } from './grammar-host.js';

export interface GrammarHostsOptions {
  /** Most host threads (default 4). */
  maxHosts?: number;
  /** Most compiled grammars a host keeps (default 16). */
  maxGrammarsPerHost?: number;
  /** How long the engine waits for a host's mask before it fails the host's matchers, ms (default 5000). */
  maskWaitMs?: number;
}

/** A grammar asked for: its matcher, once its host has made it; cancel() when the request no longer needs it. */
export interface GrammarRequest {
  constraint: Promise<TokenConstraint>;
  cancel(): void;
}

/** The request was cancelled, or the hosts closed, before its matcher was made. */
export class GrammarRequestEnded extends Error {
  constructor(why: string) {
    super(why);
    this.name = 'GrammarRequestEnded';
  }
}

interface Job {
  key: string;
  spec: StructuredOutputSpec;
  resolve(c: TokenConstraint): void;
  reject(e: Error): void;
  cancelled: boolean;
  /** Times placed again after its host failed under it (once at most: a job that keeps failing hosts fails). */
  replaced: number;
}

class Host {
  /** Compiled grammars, least recently used first. */
  readonly compiled = new Set<string>();
  /** Grammars compiling, with the jobs waiting for each. */
  readonly compiling = new Map<string, Job[]>();
  /** Jobs whose grammar is compiled here, to be sent for a matcher at the end of this dispatch. */
  toMatch: Job[] = [];
  /** Matchers asked for, by id, with their channels. */
  readonly matching = new Map<number, { job: Job; channel: Int32Array }>();
  /** Matchers held by requests, by id. */
  readonly live = new Map<number, HostedConstraint>();
  draining = false;
  dead = false;
  exited: Promise<void>;

  constructor(readonly worker: Worker, readonly bell: Int32Array) {
    this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
  }

  /** Matchers held and promised: a host compiles only at 0. */
  get load(): number {
    let n = this.toMatch.length + this.matching.size + this.live.size;
    for (const jobs of this.compiling.values()) n += jobs.length;
    return n;
  }

  jobs(): Job[] {
    return [...[...this.compiling.values()].flat(), ...this.toMatch, ...[...this.matching.values()].map((m) => m.job)];
  }

  post(m: ToHost): void {
    this.worker.postMessage(m);
  }
}

/** The key a compiled grammar is kept under (the thinking's end token is the engine's, not the grammar's). */
export function grammarKey(spec: StructuredOutputSpec): string {
  return JSON.stringify({ ...spec, afterTokenId: undefined });
}

export class GrammarHosts {
  private readonly hosts: Host[] = [];
  private queue: Job[] = [];
  private nextId = 1;
  private closed = false;
  private broken: string | null = null;
  private vocabulary: GrammarVocab | GrammarVocabFile | null = null;
  private readonly maxHosts: number;
  private readonly maxGrammarsPerHost: number;
  private readonly maskWaitMs: number;
  /** Hosts ended before close(): a trap, a crash, no answer, or a compile nobody waited for any more. */
  numEnded = 0;
  /** Compiles sent to hosts (tests: a grammar a host already has is not compiled again). */
  numCompiles = 0;
  /** Compiles hosts have begun. */
  numCompilesBegun = 0;

  /** `vocab`: a file each host reads in its own thread, or the vocabulary itself (read once, on first use). */
  constructor(private readonly vocab: GrammarVocabFile | (() => GrammarVocab), o: GrammarHostsOptions = {}) {
    this.maxHosts = o.maxHosts ?? 4;
    this.maxGrammarsPerHost = o.maxGrammarsPerHost ?? 16;
    this.maskWaitMs = o.maskWaitMs ?? 5000;
    if (!Number.isInteger(this.maxHosts) || this.maxHosts < 1) throw new Error('grammar hosts: maxHosts must be at least 1');
  }

  /** A matcher for `spec`, made in a host (the grammar compiled there first unless a host has it). */
  request(spec: StructuredOutputSpec): GrammarRequest {
    let job!: Job;
    const constraint = new Promise<TokenConstraint>((resolve, reject) => {
      job = { key: grammarKey(spec), spec, resolve, reject, cancelled: false, replaced: 0 };
    });
    if (this.closed || this.broken !== null) {
      job.reject(this.broken !== null ? new Error(this.broken) : new GrammarRequestEnded('the grammar hosts are closed'));
    } else {
      this.queue.push(job);
      this.dispatch();
    }
    return { constraint, cancel: () => this.cancel(job) };
  }

  /** Host threads running. */
  get numHosts(): number {
    return this.hosts.length;
  }

  /** Grammars compiling in hosts now. */
  get numCompiling(): number {
    return this.hosts.reduce((n, h) => n + h.compiling.size, 0);
  }

  /** Ends every host at once (a compile in flight with it); resolves when their threads have exited. */
  close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.reject(new GrammarRequestEnded('the grammar hosts are closed'));
    const exits = this.hosts.map((h) => h.exited);
    for (const h of [...this.hosts]) this.end(h, 'closed');
    return Promise.all(exits).then(() => {});
  }

  /** Ends a host as a crash would: its matchers fail, what waited on it is placed again. */
  endHost(index: number): void {
    const h = this.hosts[index];
    if (h !== undefined) this.end(h, 'failed');
  }

  private cancel(job: Job): void {
    if (job.cancelled) return;
    job.cancelled = true;
    job.reject(new GrammarRequestEnded('cancelled'));
    const at = this.queue.indexOf(job);
    if (at >= 0) {
      this.queue.splice(at, 1);
      return;
    }
    // a host busy only with compiles nobody waits for any more is ended, its thread with it
    const h = this.hosts.find((x) => x.jobs().includes(job));
    if (h !== undefined && h.compiling.size > 0 && h.live.size === 0 && h.jobs().every((j) => j.cancelled)) {
      this.end(h, 'failed');
    }
  }

  private dispatch(): void {
    if (this.closed) return;
    // hosts that may compile in this pass: nothing held, nothing promised
    const open = new Set(this.hosts.filter((h) => h.load === 0));
    for (const h of open) h.draining = false;
    let waiting = false;
    this.queue = this.queue.filter((job) => {
      if (job.cancelled) return false;
      const placed = this.place(job, open);
      waiting ||= !placed;
      return !placed;
    });
    // matchers are asked for after every compile this pass sent (a host's messages run in order)
    for (const h of this.hosts) this.sendMatches(h);
    if (waiting && this.hosts.length >= this.maxHosts && !this.hosts.some((h) => h.draining)) {
      const fewest = this.hosts.reduce((a, b) => (b.load < a.load ? b : a));
      fewest.draining = true;
    }
  }

  private place(job: Job, open: Set<Host>): boolean {
    for (const h of this.hosts) {
      if (h.draining) continue;
      if (h.compiled.has(job.key)) {
        h.compiled.delete(job.key);
        h.compiled.add(job.key);
        h.toMatch.push(job);
        return true;
      }
      const waiters = h.compiling.get(job.key);
      if (waiters !== undefined) {
        waiters.push(job);
        return true;
      }
    }
    let h = [...open].find((x) => x.compiling.size < this.maxGrammarsPerHost);
    if (h === undefined && this.hosts.length < this.maxHosts) {
      h = this.spawn(job);
      if (h === undefined) return true;
      open.add(h);
    }
    if (h === undefined) return false;
    for (const key of h.compiled) {
      if (h.compiled.size + h.compiling.size < this.maxGrammarsPerHost) break;
      h.compiled.delete(key);
      h.post({ type: 'drop', key });
    }
    h.compiling.set(job.key, [job]);
    h.post({ type: 'compile', key: job.key, spec: job.spec });
    this.numCompiles++;
    this.updateRef(h);
    return true;
  }

  /** A new host; undefined when the vocabulary cannot be read (the job is failed). */
  private spawn(job: Job): Host | undefined {
    try {
      this.vocabulary ??= typeof this.vocab === 'function' ? this.vocab() : this.vocab;
    } catch (e) {
      job.reject(e as Error);
      return undefined;
    }
    const bell = newDoorbell();
    const init: GrammarHostInit = { vocab: this.vocabulary, bell };
    const worker = new Worker(new URL('./grammar-host.js', import.meta.url), { workerData: init });
    const h = new Host(worker, bell);
    this.hosts.push(h);
    worker.on('message', (m: FromHost) => this.onMessage(h, m));
    worker.on('error', () => this.end(h, 'failed'));
    worker.on('exit', () => this.end(h, 'failed'));
    return h;
  }

  private sendMatches(h: Host): void {
    for (const job of h.toMatch.splice(0)) {
      if (job.cancelled) continue;
      const id = this.nextId++;
      const channel = newChannel(this.vocabulary!.vocabSize);
      h.matching.set(id, { job, channel });
      h.post({ type: 'match', id, key: job.key, channel });
    }
    this.updateRef(h);
  }

  private onMessage(h: Host, m: FromHost): void {
    if (h.dead) return;
    switch (m.type) {
      case 'compiling':
        this.numCompilesBegun++;
        break;
      case 'compiled': {
        const jobs = h.compiling.get(m.key) ?? [];
        h.compiling.delete(m.key);
        if (m.ok) {
          h.compiled.add(m.key);
          h.toMatch.push(...jobs);
          this.sendMatches(h);
          this.idleCheck(h);
        } else {
          for (const job of jobs) job.reject(new GrammarCompileError(m.reason, m.trapped));
          if (m.trapped) this.end(h, 'failed');
          else this.idleCheck(h);
        }
        break;
      }
      case 'matched': {
        const asked = h.matching.get(m.id);
        if (asked === undefined) return;
        h.matching.delete(m.id);
        const { job, channel } = asked;
        if (!m.ok) {
          job.reject(new GrammarCompileError(m.reason ?? null, false));
          this.idleCheck(h);
          break;
        }
        const c = new HostedConstraint(channel, h.bell, this.maskWaitMs, () => this.end(h, 'failed'), () => {
          h.live.delete(m.id);
          if (!h.dead) h.post({ type: 'release', id: m.id });
          this.idleCheck(h);
        });
        h.live.set(m.id, c);
        this.updateRef(h);
        if (job.cancelled) c.dispose();
        else job.resolve(c);
        break;
      }
      case 'trapped':
        this.end(h, 'failed');
        break;
      case 'broken':
        this.broken = `structured outputs cannot start: ${m.message}`;
        for (const job of [...this.queue.splice(0), ...h.jobs()]) job.reject(new Error(this.broken));
        h.compiling.clear();
        h.toMatch = [];
        h.matching.clear();
        this.end(h, 'failed');
        break;
    }
  }

  /** Ends a host's thread; its matchers fail, and (unless closing) what waited on it is placed again. */
  private end(h: Host, why: 'closed' | 'failed'): void {
    if (h.dead) return;
    h.dead = true;
    this.hosts.splice(this.hosts.indexOf(h), 1);
    if (why === 'failed') this.numEnded++;
    h.worker.removeAllListeners('message');
    void h.worker.terminate();
    for (const c of h.live.values()) c.fail(HOST_FAILED);
    h.live.clear();
    const again: Job[] = [];
    for (const job of h.jobs()) {
      if (job.cancelled) continue;
      if (why === 'closed') job.reject(new GrammarRequestEnded('the grammar hosts are closed'));
      else if (job.replaced > 0) job.reject(new GrammarCompileError(null, true));
      else {
        job.replaced++;
        again.push(job);
      }
    }
    h.compiling.clear();
    h.toMatch = [];
    h.matching.clear();
    if (why === 'failed') {
      this.queue.unshift(...again);
      this.dispatch();
    }
  }

  /** A host with nothing held or promised may compile again: what waits is placed. */
  private idleCheck(h: Host): void {
    this.updateRef(h);
    if (h.dead || h.load > 0) return;
    h.draining = false;
    if (this.queue.length > 0) this.dispatch();
  }

  /** A host keeps the process alive only while the engine waits for its answer (an offline run must not exit). */
  private updateRef(h: Host): void {
    if (h.compiling.size > 0 || h.matching.size > 0) h.worker.ref();
    else h.worker.unref();
  }
}
