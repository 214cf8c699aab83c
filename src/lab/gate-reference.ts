// Reference gate for lossy paths: Quire's per-step distributions against a
// reference dump (transformers' full logits, or a peer server's top-k), as KL divergence, top-1 agreement and
// max abs logprob error, checked against per-path thresholds.

import type { GateCheck } from './gate.js';

/** One decode step: a full vector (logits or logprobs) or the top-k (token, logprob) pairs. */
export type StepDistribution =
  | { logprobs: number[] }
  | { logits: number[] }
  | { top: { tokenId: number; logprob: number }[] };

export interface ReferenceDump {
  prompts: { id: string; steps: StepDistribution[] }[];
}

export interface ReferenceThresholds {
  klMeanMax: number;
  klMaxMax: number;
  top1AgreementMin: number;
  maxAbsErrorMax: number;
}

export interface ReferenceGateResult {
  pathKey: string;
  passed: boolean;
  numSteps: number;
  klMean: number;
  klMax: number;
  /** Fraction of steps whose most likely token agrees. */
  top1Agreement: number;
  maxAbsError: number;
  failures: string[];
}

type Dist = { full: Float64Array } | { top: Map<number, number> };

function logSoftmax(logits: readonly number[]): Float64Array {
  let max = -Infinity;
  for (const x of logits) if (x > max) max = x;
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(logits, (x) => x - lse);
}

function toDist(s: StepDistribution): Dist {
  if ('logits' in s) return { full: logSoftmax(s.logits) };
  if ('logprobs' in s) return { full: Float64Array.from(s.logprobs) };
  return { top: new Map(s.top.map((t) => [t.tokenId, t.logprob])) };
}

function argmax(d: Dist): number {
  let best = -1;
  let bestLp = -Infinity;
  const entries: Iterable<[number, number]> = 'full' in d ? d.full.entries() : d.top.entries();
  for (const [id, lp] of entries) {
    if (lp > bestLp) {
      bestLp = lp;
      best = id;
    }
  }
  return best;
}

/**
 * Whether the actual's most likely token is one of the reference's: its reference logprob within TIE of the
 * reference's largest. A reference whose top tokens tie (a random test model's repeated lm_head rows give hundreds of
 * exactly equal logits) has no one argmax, and which of the tied tokens each engine lists first is arbitrary.
 */
const TIE = 1e-6;
function topAgrees(ref: Dist, act: Dist): boolean {
  const best = lookup(ref, argmax(ref))!;
  const lr = lookup(ref, argmax(act));
  return lr !== undefined && lr >= best - TIE;
}

function lookup(d: Dist, id: number): number | undefined {
  return 'full' in d ? d.full[id] : d.top.get(id);
}

/**
 * KL(reference || actual) and max abs logprob error of one step. With full
 * vectors on both sides it is exact; with top-k it runs over the reference's
 * top-k plus one bucket for the rest of the mass (a token missing from the
 * actual top-k takes the actual's smallest listed logprob, an upper bound).
 */
export function stepDivergence(ref: Dist, act: Dist): { kl: number; maxAbsError: number } {
  if ('full' in ref && 'full' in act) {
    if (ref.full.length !== act.full.length) throw new Error(`vocab sizes differ: ${ref.full.length} vs ${act.full.length}`);
    let kl = 0;
    let maxAbsError = 0;
    for (let i = 0; i < ref.full.length; i++) {
      const lr = ref.full[i]!;
      const la = act.full[i]!;
      if (lr > -Infinity) kl += Math.exp(lr) * (lr - la);
      if (Number.isFinite(lr) || Number.isFinite(la)) maxAbsError = Math.max(maxAbsError, Math.abs(lr - la));
    }
    return { kl: Math.max(0, kl), maxAbsError };
  }
  const refEntries: [number, number][] = 'full' in ref ? [...ref.full.entries()].sort((a, b) => b[1] - a[1]).slice(0, 20) : [...ref.top.entries()];
  const floor = 'top' in act ? Math.min(...act.top.values()) : -Infinity;
  let kl = 0;
  let maxAbsError = 0;
  let refMass = 0;
  let actMass = 0;
  for (const [id, lr] of refEntries) {
    const known = lookup(act, id);
    const la = known ?? floor;
    kl += Math.exp(lr) * (lr - la);
    refMass += Math.exp(lr);
    actMass += Math.exp(la);
    if (known !== undefined) maxAbsError = Math.max(maxAbsError, Math.abs(lr - known));
  }
  const refRest = Math.max(0, 1 - refMass);
  const actRest = Math.max(1e-12, 1 - actMass);
  if (refRest > 1e-12) kl += refRest * Math.log(refRest / actRest);
  return { kl: Math.max(0, kl), maxAbsError };
}

export function compareToReference(
  actual: ReferenceDump,
  reference: ReferenceDump,
  thresholdsByPath: Record<string, ReferenceThresholds>,
  pathKey: string,
): ReferenceGateResult {
  const t = thresholdsByPath[pathKey];
  if (!t) throw new Error(`no reference thresholds for path ${pathKey} (have ${Object.keys(thresholdsByPath).join(', ') || 'none'})`);
  const failures: string[] = [];
  const kls: number[] = [];
  let numAgree = 0;
  let maxAbsError = 0;
  for (const ref of reference.prompts) {
    const act = actual.prompts.find((p) => p.id === ref.id);
    if (!act) {
      failures.push(`prompt ${ref.id}: missing from the actual dump`);
      continue;
    }
    if (act.steps.length !== ref.steps.length) failures.push(`prompt ${ref.id}: ${act.steps.length} steps, reference has ${ref.steps.length}`);
    const n = Math.min(act.steps.length, ref.steps.length);
    for (let i = 0; i < n; i++) {
      const r = toDist(ref.steps[i]!);
      const a = toDist(act.steps[i]!);
      const d = stepDivergence(r, a);
      kls.push(d.kl);
      maxAbsError = Math.max(maxAbsError, d.maxAbsError);
      if (topAgrees(r, a)) numAgree++;
    }
  }
  const numSteps = kls.length;
  const klMean = numSteps ? kls.reduce((s, x) => s + x, 0) / numSteps : NaN;
  const klMax = numSteps ? Math.max(...kls) : NaN;
  const top1Agreement = numSteps ? numAgree / numSteps : NaN;
  if (numSteps === 0) failures.push('no steps compared');
  if (!(klMean <= t.klMeanMax)) failures.push(`KL mean ${klMean.toExponential(3)} > ${t.klMeanMax}`);
  if (!(klMax <= t.klMaxMax)) failures.push(`KL max ${klMax.toExponential(3)} > ${t.klMaxMax}`);
  if (!(top1Agreement >= t.top1AgreementMin)) failures.push(`top-1 agreement ${top1Agreement.toFixed(4)} < ${t.top1AgreementMin}`);
  if (!(maxAbsError <= t.maxAbsErrorMax)) failures.push(`max abs error ${maxAbsError.toExponential(3)} > ${t.maxAbsErrorMax}`);
  return { pathKey, passed: failures.length === 0, numSteps, klMean, klMax, top1Agreement, maxAbsError, failures };
}

/**
 * A reference file as written by tools/reference/reference_logits.py (full `logits` a step) or by `quire gate
 * --dump-peer` (a peer server's `top` logprobs a step). Each step k sits at `position` (prompt.length + k when
 * absent), after the reference's own greedy tokens up to there: the prefix Quire is teacher-forced with.
 */
export interface ReferenceFile {
  prompts: {
    id?: string;
    prompt: number[];
    greedy: number[];
    steps: ({ position?: number } & ({ logits: number[] } | { top: { tokenId: number; logprob: number }[] }))[];
  }[];
}

/** The reference's distributions and, for each step, the token prefix to ask Quire's next-token distribution at. */
export function readReferenceFile(obj: unknown, file: string): { reference: ReferenceDump; prefixes: { id: string; steps: number[][] }[] } {
  const bad = (what: string): never => { throw new Error(`${file}: ${what}`); };
  const f = obj as Partial<ReferenceFile> | null;
  if (typeof f !== 'object' || f === null || !Array.isArray(f.prompts)) bad('expected {"prompts": [{prompt, greedy, steps}, ...]}');
  const reference: ReferenceDump = { prompts: [] };
  const prefixes: { id: string; steps: number[][] }[] = [];
  for (const [i, p] of f!.prompts!.entries()) {
    const id = p.id ?? `p${i}`;
    if (!Array.isArray(p.prompt) || !Array.isArray(p.greedy) || !Array.isArray(p.steps)) bad(`prompt ${id}: needs prompt, greedy and steps arrays`);
    const steps: StepDistribution[] = [];
    const stepPrefixes: number[][] = [];
    for (const [k, s] of p.steps.entries()) {
      if ('logits' in s && Array.isArray(s.logits)) steps.push({ logits: s.logits });
      else if ('top' in s && Array.isArray(s.top) && s.top.length > 0) steps.push({ top: s.top });
      else bad(`prompt ${id} step ${k}: carries neither logits nor a non-empty top list`);
      const offset = (s.position ?? p.prompt.length + k) - p.prompt.length;
      if (!Number.isInteger(offset) || offset < 0 || offset > p.greedy.length) bad(`prompt ${id} step ${k}: position ${s.position} is not within prompt + greedy`);
      stepPrefixes.push([...p.prompt, ...p.greedy.slice(0, offset)]);
    }
    reference.prompts.push({ id, steps });
    prefixes.push({ id, steps: stepPrefixes });
  }
  return { reference, prefixes };
}

export function referenceCheck(r: ReferenceGateResult): GateCheck {
  const figures = `KL mean ${r.klMean.toExponential(2)}, max ${r.klMax.toExponential(2)}, top-1 ${(r.top1Agreement * 100).toFixed(1)}%, max abs ${r.maxAbsError.toExponential(2)} over ${r.numSteps} steps`;
  return { name: `reference ${r.pathKey}`, kind: 'reference', passed: r.passed, detail: r.passed ? figures : `${figures}; ${r.failures.join('; ')}` };
}
