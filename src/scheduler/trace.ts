// Admission trace: what each step admitted, summed and bucketed.

export interface StepTrace {
  numDecodeTokens: number;
  /** Prompt (or recompute) tokens scheduled, first chunks and continued ones. */
  numPromptTokens: number;
  /** Requests in the waiting queue when the step began. */
  numWaitingPrompts: number;
  numStartedPrompts: number;
  numContinuedPrompts: number;
  numPreemptions: number;
}

/** Bucket i counts values in [bounds[i], bounds[i + 1]); the last bucket is open. */
export interface Histogram {
  bounds: number[];
  counts: number[];
}

export interface TraceSummary {
  numSteps: number;
  numDecodeOnlySteps: number;
  numDecodeTokens: number;
  numPromptTokens: number;
  numStartedPrompts: number;
  numContinuedPrompts: number;
  numPreemptions: number;
  promptTokensPerStep: Histogram;
  decodeTokensPerStep: Histogram;
  waitingPromptsPerStep: Histogram;
}

/** Bounds 0, 1, 2, 4, 8, ... up to the first power of two above `max`. */
export function histogram(values: readonly number[]): Histogram {
  const max = values.reduce((m, v) => Math.max(m, v), 0);
  const bounds = [0, 1];
  while (bounds[bounds.length - 1]! <= max) bounds.push(bounds[bounds.length - 1]! * 2);
  bounds.pop();
  const counts = new Array<number>(bounds.length).fill(0);
  for (const v of values) {
    let i = bounds.length - 1;
    while (bounds[i]! > v) i--;
    counts[i]!++;
  }
  return { bounds, counts };
}

export class AdmissionTrace {
  readonly steps: StepTrace[] = [];

  record(step: StepTrace): void {
    this.steps.push(step);
  }

  summary(): TraceSummary {
    const sum = (f: (s: StepTrace) => number) => this.steps.reduce((a, s) => a + f(s), 0);
    return {
      numSteps: this.steps.length,
      numDecodeOnlySteps: this.steps.filter((s) => s.numDecodeTokens > 0 && s.numPromptTokens === 0).length,
      numDecodeTokens: sum((s) => s.numDecodeTokens),
      numPromptTokens: sum((s) => s.numPromptTokens),
      numStartedPrompts: sum((s) => s.numStartedPrompts),
      numContinuedPrompts: sum((s) => s.numContinuedPrompts),
      numPreemptions: sum((s) => s.numPreemptions),
      promptTokensPerStep: histogram(this.steps.map((s) => s.numPromptTokens)),
      decodeTokensPerStep: histogram(this.steps.map((s) => s.numDecodeTokens)),
      waitingPromptsPerStep: histogram(this.steps.map((s) => s.numWaitingPrompts)),
    };
  }
}

function formatHistogram(name: string, h: Histogram): string[] {
  const lines = [`${name}:`];
  h.bounds.forEach((lo, i) => {
    if (h.counts[i] === 0) return;
    const hi = h.bounds[i + 1];
    const range = hi === undefined ? `>=${lo}` : hi - lo === 1 ? `${lo}` : `${lo}-${hi - 1}`;
    lines.push(`  ${range.padStart(12)}  ${h.counts[i]}`);
  });
  return lines;
}

export function formatTraceSummary(s: TraceSummary): string {
  return [
    `steps ${s.numSteps} (decode-only ${s.numDecodeOnlySteps}), decode tokens ${s.numDecodeTokens}, ` +
      `prompt tokens ${s.numPromptTokens}`,
    `prompts started ${s.numStartedPrompts}, continued ${s.numContinuedPrompts}, preemptions ${s.numPreemptions}`,
    ...formatHistogram('prompt tokens per step', s.promptTokensPerStep),
    ...formatHistogram('decode tokens per step', s.decodeTokensPerStep),
    ...formatHistogram('waiting prompts per step', s.waitingPromptsPerStep),
  ].join('\n');
}
