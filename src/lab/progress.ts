// Progress of a long step: a cli-progress bar with an estimate of the time left on a terminal, else a log line now
// and then (every 10 s, and at the end), so a log file shows the run is alive and how far it got.

import { createRequire } from 'node:module';

export interface Progress {
  /** Sets how far it got (absolute), with an optional word on what it is doing. */
  update(value: number, detail?: string): void;
  increment(delta?: number, detail?: string): void;
  /** Ends the bar or logs the last line (value set to total when `complete`). */
  stop(complete?: boolean): void;
}

export interface ProgressOptions {
  label: string;
  total: number;
  /** Unit of value and total ("requests", "MiB"...). */
  unit: string;
  /** A bar (true) or log lines (false); default: whether the stream is a TTY. */
  tty?: boolean;
  stream?: NodeJS.WriteStream;
  /** Between log lines when not a TTY. */
  logEveryMs?: number;
  /** Formats value and total for the log lines (default: as they are). */
  format?: (n: number) => string;
  now?: () => number;
}

interface Bar {
  start(total: number, value: number, payload?: object): void;
  update(value: number, payload?: object): void;
  stop(): void;
}

export function startProgress(opts: ProgressOptions): Progress {
  const stream = opts.stream ?? process.stderr;
  const tty = opts.tty ?? stream.isTTY === true;
  const fmt = opts.format ?? ((n: number) => String(Math.round(n)));
  let value = 0;
  let detail = '';
  if (tty) {
    const cliProgress = createRequire(import.meta.url)('cli-progress') as {
      SingleBar: new (o: object, preset: object) => Bar;
      Presets: { shades_classic: object };
    };
    const bar = new cliProgress.SingleBar({
      format: `${opts.label} {bar} {percentage}% | {shown}/{shownTotal} ${opts.unit} | {duration_formatted}, `
        + 'ETA {eta_formatted} {detail}',
      stream, hideCursor: true, etaBuffer: 50, clearOnComplete: false,
    }, cliProgress.Presets.shades_classic);
    const payload = () => ({ shown: fmt(value), shownTotal: fmt(opts.total), detail });
    bar.start(opts.total, 0, payload());
    return {
      update(v, d) { value = v; if (d !== undefined) detail = d; bar.update(v, payload()); },
      increment(dv = 1, d) { this.update(value + dv, d); },
      stop(complete = true) { if (complete) bar.update(opts.total, payload()); bar.stop(); },
    };
  }
  const now = opts.now ?? (() => performance.now());
  const t0 = now();
  const every = opts.logEveryMs ?? 10_000;
  let lastLog = t0;
  const line = () => {
    const s = (now() - t0) / 1000;
    const share = opts.total > 0 ? value / opts.total : 0;
    const eta = share > 0 && share < 1 ? `, about ${Math.round(s / share - s)} s left` : '';
    stream.write(`${opts.label}: ${fmt(value)}/${fmt(opts.total)} ${opts.unit} (${Math.round(100 * share)}%), `
      + `${s.toFixed(1)} s${eta}${detail ? ` ${detail}` : ''}\n`);
  };
  return {
    update(v, d) {
      value = v;
      if (d !== undefined) detail = d;
      if (now() - lastLog >= every) {
        lastLog = now();
        line();
      }
    },
    increment(dv = 1, d) { this.update(value + dv, d); },
    stop(complete = true) {
      if (complete) value = opts.total;
      line();
    },
  };
}
