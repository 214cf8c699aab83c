// Picks the fastest of cuBLASLt's single-chain candidates for a bf16 GEMM shape by timing them once, on the GEMM's own
// operands, the first time the shape runs eagerly. Why: the heuristic's first single-chain pick can be far off. On an
// H200 (session 46, lab/bench-gemm.ts) qwen3.5-27b's down GEMM (N 5120, K 17408) at 128 rows took 0.385 ms on it,
// while its 7th candidate took 0.083 ms. Only candidates whose output bits equal the first's on those operands are
// timed: most single-chain algorithms sum each output over K in the same order, but not all (session 46: the 6th at
// that shape differed in the last bit of some outputs; cublas-split.test.ts), and the engine's bits must not depend on
// which candidate wins a race. A stream being captured is never timed: the graphs' eager run before each capture
// (graphs.ts) has already tuned its shapes.

import type { GemmTuner } from './ffi/cublaslt.js';
import { check } from './ffi/driver.js';
import type { Device } from './device.js';
import { EventTimer } from './event-timer.js';

/** Timed runs a candidate gets (after the one whose bits are compared): the best of ROUNDS rounds of REPS. */
const ROUNDS = 2;
const REPS = 3;

export class EventGemmTuner implements GemmTuner {
  private timer: EventTimer | null = null;
  /** Shapes tuned, for start-up logs and tests. */
  numTuned = 0;
  /** Per shape tuned, the candidates with the first's bits (those timed). */
  readonly numEligible: number[] = [];

  constructor(private readonly device: Device, readonly upToRows: number) {}

  fastest(launches: readonly (() => void)[], output: { ptr: bigint; bytes: number }): number {
    if (launches.length < 2 || this.capturing()) return 0;
    const host = this.device.hostAlloc(output.bytes);
    const bits = (): Buffer => {
      this.device.copyToHostAsync(host, output.ptr, output.bytes);
      this.device.synchronize();
      return Buffer.from(host.view.slice(0, output.bytes));
    };
    let first: Buffer | null = null;
    let times: number[];
    try {
      times = launches.map((launch) => {
        launch();
        const out = bits();
        first ??= out;
        return out.equals(first) ? this.time(launch) : Infinity;
      });
    } finally {
      this.device.hostFree(host);
    }
    this.numTuned++;
    this.numEligible.push(times.filter(Number.isFinite).length);
    return times.indexOf(Math.min(...times));
  }

  /** Milliseconds of REPS launches (after one untimed), the best of ROUNDS. */
  private time(launch: () => void): number {
    this.timer ??= new EventTimer(this.device);
    let best = Infinity;
    for (let round = 0; round < ROUNDS; round++) best = Math.min(best, this.timer.time(REPS, launch));
    return best;
  }

  private capturing(): boolean {
    const status: [number] = [0];
    check(this.device.api.cuStreamIsCapturing(this.device.stream, status), 'cuStreamIsCapturing');
    return status[0] !== 0;
  }

  dispose(): void {
    this.timer?.dispose();
    this.timer = null;
  }
}
