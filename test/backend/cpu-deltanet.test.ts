// The CPU backend's gated DeltaNet ops against the formulas written out plainly here (transformers' GatedDeltaNet:
// causal_conv1d_fn, torch_recurrent_gated_delta_rule, RMSNormGated), per-sequence state carried across chunks and
// reset at position 0; and transformers' chunked form (torch_chunk_gated_delta_rule, written out here too) equal to
// the recurrent one, which is why the CPU reference may compute a prompt chunk token by token.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ForwardBatch } from '../../src/backend/batch.js';
import type { DeltaNetShape } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { bf16BitsToF32, f32ToBf16Bits } from '../../src/loader/dtype.js';
import { assertClose, hostF32, randomArray, seqBatch } from './helpers.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
after(() => backend.dispose());
const shape: DeltaNetShape = { numKeyHeads: 2, numValueHeads: 4, keyDim: 8, valueDim: 4, convKernel: 4 };
const C = 2 * 2 * 8 + 4 * 4;
const Hv = 4;

const up = (name: string, shp: number[], v: Float32Array) => backend.upload(hostF32(name, shp, v));
const silu = (v: number) => v / (1 + Math.exp(-v));
const softplus = (v: number) => v > 20 ? v : Math.log1p(Math.exp(v));

/** One sequence from zero state: conv over its rows [n][C] (zero history), then silu. */
function convReference(x: Float32Array, w: Float32Array, n: number): number[][] {
  const K = shape.convKernel;
  return Array.from({ length: n }, (_, t) => Array.from({ length: C }, (_, c) => {
    let s = 0;
    for (let j = 0; j < K; j++) {
      const r = t - (K - 1) + j;
      if (r >= 0) s += w[c * K + j]! * x[r * C + c]!;
    }
    return silu(s);
  }));
}

interface RuleInputs { q: number[][][]; k: number[][][]; v: number[][][]; g: number[][]; beta: number[][] }

/** conv rows -> per token, per v head: l2-normed q (scaled) and k of its k head, v, g and beta. */
function ruleInputs(conv: number[][], ba: Float32Array, aLog: Float32Array, dtBias: Float32Array): RuleInputs {
  const { numKeyHeads: Hk, keyDim: Dk, valueDim: Dv } = shape;
  const l2 = (u: number[]) => { const s = 1 / Math.sqrt(u.reduce((a, b) => a + b * b, 0) + 1e-6); return u.map((e) => e * s); };
  const out: RuleInputs = { q: [], k: [], v: [], g: [], beta: [] };
  conv.forEach((row, t) => {
    const head = (h: number) => Math.floor(h / (Hv / Hk));
    out.q.push(Array.from({ length: Hv }, (_, h) => l2(row.slice(head(h) * Dk, (head(h) + 1) * Dk)).map((e) => e / Math.sqrt(Dk))));
    out.k.push(Array.from({ length: Hv }, (_, h) => l2(row.slice(Hk * Dk + head(h) * Dk, Hk * Dk + (head(h) + 1) * Dk))));
    out.v.push(Array.from({ length: Hv }, (_, h) => row.slice(2 * Hk * Dk + h * Dv, 2 * Hk * Dk + (h + 1) * Dv)));
    out.g.push(Array.from({ length: Hv }, (_, h) => -Math.exp(aLog[h]!) * softplus(ba[t * 2 * Hv + Hv + h]! + dtBias[h]!)));
    out.beta.push(Array.from({ length: Hv }, (_, h) => 1 / (1 + Math.exp(-ba[t * 2 * Hv + h]!))));
  });
  return out;
}

/** torch_recurrent_gated_delta_rule, one head h, state S [Dk][Dv] updated in place; outputs [n][Dv]. */
function recurrent(r: RuleInputs, h: number, S: number[][]): number[][] {
  return r.q.map((_, t) => {
    const [q, k, v] = [r.q[t]![h]!, r.k[t]![h]!, r.v[t]![h]!];
    const decay = Math.exp(r.g[t]![h]!);
    for (const row of S) row.forEach((_, j) => (row[j] = row[j]! * decay));
    const delta = v.map((vj, j) => (vj - S.reduce((a, row, d) => a + row[j]! * k[d]!, 0)) * r.beta[t]![h]!);
    S.forEach((row, d) => row.forEach((_, j) => (row[j] = row[j]! + k[d]! * delta[j]!)));
    return v.map((_, j) => S.reduce((a, row, d) => a + row[j]! * q[d]!, 0));
  });
}

/** torch_chunk_gated_delta_rule's algorithm (UT transform per chunk, then the scan over chunks), one head. */
function chunked(r: RuleInputs, h: number, chunk: number): number[][] {
  const { keyDim: Dk, valueDim: Dv } = shape;
  const dot = (a: number[], b: number[]) => a.reduce((s, e, i) => s + e * b[i]!, 0);
  let S = Array.from({ length: Dk }, () => new Array<number>(Dv).fill(0));
  const out: number[][] = [];
  for (let c0 = 0; c0 < r.q.length; c0 += chunk) {
    const idx = Array.from({ length: Math.min(chunk, r.q.length - c0) }, (_, i) => c0 + i);
    const q = idx.map((t) => r.q[t]![h]!), k = idx.map((t) => r.k[t]![h]!), v = idx.map((t) => r.v[t]![h]!);
    const beta = idx.map((t) => r.beta[t]![h]!);
    const cum: number[] = [];
    idx.forEach((t, i) => cum.push((i > 0 ? cum[i - 1]! : 0) + r.g[t]![h]!));
    const n = idx.length;
    // (I + L) X = B, L[i][j] = beta_i k_i.k_j exp(cum_i - cum_j) for j < i: forward substitution
    const solve = (B: number[][]) => {
      const X: number[][] = [];
      for (let i = 0; i < n; i++) {
        X.push(B[i]!.map((b, e) => b - X.reduce((s, xj, j) => s + beta[i]! * dot(k[i]!, k[j]!) * Math.exp(cum[i]! - cum[j]!) * xj[e]!, 0)));
      }
      return X;
    };
    const U = solve(v.map((vi, i) => vi.map((e) => e * beta[i]!)));
    const W = solve(k.map((ki, i) => ki.map((e) => e * beta[i]! * Math.exp(cum[i]!))));
    const vNew = U.map((u, i) => u.map((e, j) => e - W[i]!.reduce((s, w, d) => s + w * S[d]![j]!, 0)));
    for (let i = 0; i < n; i++) {
      out.push(Array.from({ length: Dv }, (_, j) => {
        let o = q[i]!.reduce((s, e, d) => s + e * Math.exp(cum[i]!) * S[d]![j]!, 0);
        for (let m = 0; m <= i; m++) o += dot(q[i]!, k[m]!) * Math.exp(cum[i]! - cum[m]!) * vNew[m]![j]!;
        return o;
      }));
    }
    const last = cum[n - 1]!;
    S = S.map((row, d) => row.map((s, j) => s * Math.exp(last) +
      k.reduce((a, km, m) => a + km[d]! * Math.exp(last - cum[m]!) * vNew[m]![j]!, 0)));
  }
  return out;
}

function inputs(n: number, seed: number) {
  return { x: randomArray(n * C, seed), ba: randomArray(n * 2 * Hv, seed + 1, -2, 2) };
}
const w = randomArray(C * shape.convKernel, 7);
const aLog = randomArray(Hv, 8, -1, 1);
const dtBias = randomArray(Hv, 9, -1, 1);
const [wT, aLogT, dtBiasT] = [up('conv', [C, shape.convKernel], w), up('A_log', [Hv], aLog), up('dt_bias', [Hv], dtBias)];

/** The ops over `batch` (x, ba its rows): the conv output and the rule's output, to the host. */
function runOps(batch: ForwardBatch, x: Float32Array, ba: Float32Array, layer = 0): { conv: Float32Array; out: Float32Array } {
  const step = backend.beginStep(batch);
  const conv = backend.causalConv1d(up('x', [batch.numTokens, C], x), wT, layer, step);
  const out = backend.gatedDeltaRule(conv, up('ba', [batch.numTokens, 2 * Hv], ba), aLogT, dtBiasT, shape, layer, step);
  return { conv: backend.toHost(conv), out: backend.toHost(out) };
}

/** The plain formulas over one sequence from zero state -> [n, Hv * Dv] row-major. */
function referenceOut(x: Float32Array, ba: Float32Array, n: number): { conv: number[][]; out: Float32Array } {
  const conv = convReference(x, w, n);
  const r = ruleInputs(conv, ba, aLog, dtBias);
  const out = new Float32Array(n * Hv * shape.valueDim);
  for (let h = 0; h < Hv; h++) {
    const S = Array.from({ length: shape.keyDim }, () => new Array<number>(shape.valueDim).fill(0));
    recurrent(r, h, S).forEach((row, t) => out.set(row, t * Hv * shape.valueDim + h * shape.valueDim));
  }
  return { conv, out };
}

backend.allocateRecurrentState({ numSlots: 4, numLayers: 2, shape });

test('causalConv1d and gatedDeltaRule: one prompt from zero state, as the formulas say', () => {
  const n = 9;
  const { x, ba } = inputs(n, 1);
  const got = runOps(seqBatch([{ n, start: 0, slot: 2 }]), x, ba);
  const ref = referenceOut(x, ba, n);
  assertClose(got.conv, ref.conv.flat(), 1e-6, 'conv');
  assertClose(got.out, ref.out, 1e-5, 'delta rule');
});

test('the state carries across chunks and decode steps; position 0 starts from zeros whatever the slot held', () => {
  const n = 11;
  const { x, ba } = inputs(n, 2);
  const ref = referenceOut(x, ba, n);
  const outs: Float32Array[] = [];
  // 5 + 3 + 1 + 1 + 1 tokens on slot 1 of layer 1, after the slot was left dirty by another sequence
  runOps(seqBatch([{ n: 4, start: 0, slot: 1 }]), inputs(4, 40).x, inputs(4, 40).ba, 1);
  let at = 0;
  for (const len of [5, 3, 1, 1, 1]) {
    const rows = (a: Float32Array, width: number) => a.slice(at * width, (at + len) * width);
    outs.push(runOps(seqBatch([{ n: len, start: at, slot: 1 }]), rows(x, C), rows(ba, 2 * Hv), 1).out);
    at += len;
  }
  assertClose(Float32Array.from(outs.flatMap((o) => [...o])), ref.out, 1e-5, 'chunked prefill + decode');
});

test('bf16 states (ssmCacheDtype): each step\'s state rounded to bf16 as it is kept, the rule in f32 between', () => {
  const bf = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1, ssmCacheDtype: 'bf16' });
  try {
    assert.equal(bf.ssmCacheDtype, 'bf16');
    bf.allocateRecurrentState({ numSlots: 2, numLayers: 1, shape });
    const put = (name: string, shp: number[], v: Float32Array) => bf.upload(hostF32(name, shp, v));
    const [wB, aLogB, dtBiasB] = [put('conv', [C, shape.convKernel], w), put('A_log', [Hv], aLog),
      put('dt_bias', [Hv], dtBias)];
    const n = 11;
    const { x, ba } = inputs(n, 6);
    const r = ruleInputs(convReference(x, w, n), ba, aLog, dtBias);
    const Dv = shape.valueDim;
    const expected = new Float32Array(n * Hv * Dv);
    const unrounded = referenceOut(x, ba, n).out;
    const S = Array.from({ length: Hv }, () => Array.from({ length: shape.keyDim },
      () => new Array<number>(Dv).fill(0)));
    let at = 0;
    for (const len of [5, 3, 1, 1, 1]) {
      const step = bf.beginStep(seqBatch([{ n: len, start: at, slot: 1 }]));
      const conv = bf.causalConv1d(put('x', [len, C], x.slice(at * C, (at + len) * C)), wB, 0, step);
      const baStep = put('ba', [len, 2 * Hv], ba.slice(at * 2 * Hv, (at + len) * 2 * Hv));
      const got = bf.toHost(bf.gatedDeltaRule(conv, baStep, aLogB, dtBiasB, shape, 0, step));
      // the formulas over this step's tokens from the kept state, then the state rounded to bf16 (nearest even)
      const part = (a: number[][][] | number[][]) => a.slice(at, at + len);
      const slice = { q: part(r.q), k: part(r.k), v: part(r.v), g: part(r.g), beta: part(r.beta) } as RuleInputs;
      for (let h = 0; h < Hv; h++) {
        recurrent(slice, h, S[h]!).forEach((row, t) => expected.set(row, (at + t) * Hv * Dv + h * Dv));
        for (const row of S[h]!) row.forEach((e, j) => (row[j] = bf16BitsToF32(f32ToBf16Bits(e))));
      }
      assertClose(got, expected.slice(at * Hv * Dv, (at + len) * Hv * Dv), 1e-5, `step at ${at}`);
      at += len;
    }
    // the first step's outputs are the f32 states' (rounding comes after); later ones are not
    assertClose(expected.slice(0, 5 * Hv * Dv), unrounded.slice(0, 5 * Hv * Dv), 1e-5, 'first step');
    const drift = Math.max(...expected.map((e, i) => Math.abs(e - unrounded[i]!)));
    assert.ok(drift > 1e-4, `bf16 states change later outputs (largest difference ${drift})`);
  } finally {
    bf.dispose();
  }
});

test('copyRecurrentState: the destination slot continues exactly as the source would, every layer; bad slots throw', () => {
  const n = 11;
  const { x, ba } = inputs(n, 5);
  const rows = (a: Float32Array, width: number, from: number, to: number) => a.slice(from * width, to * width);
  const tail = (slot: number, layer: number) => runOps(seqBatch([{ n: n - 6, start: 6, slot }]), rows(x, C, 6, n),
    rows(ba, 2 * Hv, 6, n), layer).out;
  for (const layer of [0, 1]) runOps(seqBatch([{ n: 6, start: 0, slot: 0 }]), rows(x, C, 0, 6), rows(ba, 2 * Hv, 0, 6), layer);
  runOps(seqBatch([{ n: 3, start: 0, slot: 3 }]), inputs(3, 41).x, inputs(3, 41).ba, 1);  // slot 3 left dirty
  backend.copyRecurrentState(0, 3);
  for (const layer of [0, 1]) assert.deepEqual(tail(3, layer), tail(0, layer), `layer ${layer}`);
  assert.throws(() => backend.copyRecurrentState(0, 4), /outside the 4 allocated/);
  assert.throws(() => new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 }).copyRecurrentState(0, 1), /no recurrent state/);
});

test('sequences of a batch keep to their own slots and rows; a slotless padding row starts from zeros and keeps nothing', () => {
  const a = inputs(6, 3);
  const b = inputs(2, 4);
  const pad = inputs(1, 5);
  const refA = referenceOut(a.x, a.ba, 6);
  const refB = referenceOut(b.x, b.ba, 2);
  const refPad = referenceOut(pad.x, pad.ba, 1);
  const got = runOps(seqBatch([{ n: 6, start: 0, slot: 3 }, { n: 2, start: 0, slot: 0 }, { n: 1, start: 0, slot: -1 }]),
    Float32Array.from([...a.x, ...b.x, ...pad.x]), Float32Array.from([...a.ba, ...b.ba, ...pad.ba]));
  const D = Hv * shape.valueDim;
  assertClose(got.out.subarray(0, 6 * D), refA.out, 1e-5, 'sequence a');
  assertClose(got.out.subarray(6 * D, 8 * D), refB.out, 1e-5, 'sequence b');
  assertClose(got.out.subarray(8 * D), refPad.out, 1e-5, 'padding row');
  // continuing b alone gives what b's whole sequence gives
  const c = inputs(3, 6);
  const whole = referenceOut(Float32Array.from([...b.x, ...c.x]), Float32Array.from([...b.ba, ...c.ba]), 5);
  assertClose(runOps(seqBatch([{ n: 3, start: 2, slot: 0 }]), c.x, c.ba).out, whole.out.subarray(2 * D), 1e-5, 'b continued');
  assert.throws(() => runOps(seqBatch([{ n: 1, start: 4, slot: -1 }]), pad.x, pad.ba), /continues at position 4 but has no state slot/);
});

test("transformers' chunked form equals the recurrent form (chunks of 4 over 11 tokens, and of 64)", () => {
  const n = 11;
  const { x, ba } = inputs(n, 11);
  const r = ruleInputs(convReference(x, w, n), ba, aLog, dtBias);
  for (let h = 0; h < Hv; h++) {
    const rec = recurrent(r, h, Array.from({ length: shape.keyDim }, () => new Array<number>(shape.valueDim).fill(0)));
    for (const size of [4, 64]) assertClose(Float32Array.from(chunked(r, h, size).flat()), rec.flat(), 1e-6, `head ${h}, chunk ${size}`);
  }
});

test('rmsNormGated: per v head, rmsnorm(x) * w * silu(z); sigmoidMul: x * sigmoid(g)', () => {
  const [T, N, G] = [3, 16, 4];
  const x = randomArray(T * N, 20), z = randomArray(T * N, 21, -3, 3), wn = randomArray(G, 22, 0.5, 1.5);
  backend.beginStep(seqBatch([{ n: T, start: 0, slot: -1 }]));
  const got = backend.toHost(backend.rmsNormGated(up('x', [T, N], x), up('z', [T, N], z), up('w', [G], wn), 1e-6));
  const ref = Array.from(x, (_, i) => {
    const g0 = i - (i % G);
    const ms = Array.from(x.subarray(g0, g0 + G)).reduce((a, e) => a + e * e, 0) / G;
    return x[i]! / Math.sqrt(ms + 1e-6) * wn[i % G]! * silu(z[i]!);
  });
  assertClose(got, ref, 1e-6, 'rmsNormGated');
  const sig = backend.toHost(backend.sigmoidMul(up('x', [T, N], x), up('z', [T, N], z)));
  assertClose(sig, Array.from(x, (e, i) => e / (1 + Math.exp(-z[i]!))), 1e-6, 'sigmoidMul');
});

test('columns: a [T, width] copy of x\'s columns [start, start + width); outside x, an error naming the range', () => {
  const [T, N] = [3, 7];
  const x = randomArray(T * N, 40);
  const got = backend.toHost(backend.columns(up('x', [T, N], x), 2, 4));
  assert.deepEqual(got, Float32Array.from({ length: T * 4 }, (_, i) => x[Math.floor(i / 4) * N + 2 + (i % 4)]!));
  assert.throws(() => backend.columns(up('x', [T, N], x), 5, 3), /columns: \[5, 8\) of \[3, 7\]/);
});

test('qkNormRope with partial rotary: the first 2 * invFreq.length channels of each head turn, the rest pass', () => {
  const [H, KVH, D] = [2, 1, 8];
  const W = (H + 2 * KVH) * D;
  const positions = [5, 9];
  const qkv = randomArray(2 * W, 30);
  const invFreq = new Float32Array([1, 0.1]);
  const batch = { ...seqBatch([{ n: 2, start: 8, slot: -1 }]), positions: Int32Array.from(positions) };
  const step = backend.beginStep(batch);
  const t = up('qkv', [2, W], qkv.slice());
  backend.qkNormRope(t, null, null, 1e-6, H, KVH, { headDim: D, invFreq }, step);
  const got = backend.toHost(t);
  positions.forEach((p, row) => {
    for (let h = 0; h < H + KVH; h++) {
      const off = row * W + h * D;
      const x = qkv.subarray(off, off + D);
      const rot = [0, 1].map((i) => [x[i]! * Math.cos(p * invFreq[i]!) - x[i + 2]! * Math.sin(p * invFreq[i]!),
        x[i + 2]! * Math.cos(p * invFreq[i]!) + x[i]! * Math.sin(p * invFreq[i]!)]);
      assertClose(got.subarray(off, off + D), [rot[0]![0]!, rot[1]![0]!, rot[0]![1]!, rot[1]![1]!, ...x.subarray(4)], 1e-6,
        `row ${row} head ${h}`);
    }
    assertClose(got.subarray(row * W + (H + KVH) * D, (row + 1) * W), qkv.subarray(row * W + (H + KVH) * D, (row + 1) * W), 0, 'v untouched');
  });
});
