// Expert parallelism on CUDA (vLLM's --enable-expert-parallel). One GPU: the kernels with MoeExperts.local (a rank's
// whole experts, linear or round-robin) against the CPU backend's: the routing written as local slots (-1 for
// another rank's expert), by moe_route and by the fused router, grouped over the local experts only (offsets and tile
// lists expertTileList's); moeExperts on decode (split) and prefill (tiled) shapes, each rank's output near the
// CPU's and the ranks' sum near the whole layer's; the combine fused with the residual add and norm with the
// unfused ops' bits. Two GPUs (skipped on fewer): -tp 2 --enable-expert-parallel through the LLM class, which must
// score -tp 1's transcripts (teacher-forced logprobs) about as near as -tp 2 without it does, on tiny MoE models
// (Qwen3-MoE; Qwen3-Next with its shared expert split on its width), graphs and eager alike.
//   npm run build && node scripts/run-tests.mjs --gpu expert-parallel

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MoeExperts, MoeRoute } from '../../src/backend/backend.js';
import type { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { expertTileList, MOE_FUSED_ROUTER_MAX_ROWS, planMoe } from '../../src/backend/cuda/moe-plan.js';
import { cudaAvailable } from '../../src/backend/cuda/probe.js';
import { routeTokens, toLocalSlots } from '../../src/backend/moe-route.js';
import { transcriptMd5 } from '../../src/lab/gate-transcript.js';
import { bf16ToF32, f32ToBf16 } from '../../src/loader/dtype.js';
import type { LocalExperts } from '../../src/loader/types.js';
import { expertParallel } from '../../src/parallel/sharding.js';
import { makeTestModel } from '../../src/tools/make-test-model.js';
import { batchOf } from '../backend/helpers.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep, bitsOf, newCpu, newCuda, noCuda, randomBf16,
  uploadBoth } from './cuda-helpers.js';
import { PROMPTS } from './tp-prompts.js';
import { LLM } from '../../src/engine/llm.js';
import type { EngineOptions } from '../../src/engine/options.js';

const oneToken = batchOf([{ ids: [1], start: 0, pages: [0] }], 16);

/** A router [E, H] whose logit e is 4 x[e] (E <= H): exact in any sum order, so the CPU and the device route alike. */
function pickingRouter(E: number, H: number): Float32Array {
  const r = new Float32Array(E * H);
  for (let e = 0; e < E; e++) r[e * H + e] = 4;
  return r;
}

/** Rows of `rowsPerExpert` of each of `experts` (global ids) out of a stacked [E * rowsPerExpert, cols] weight. */
function expertRows(all: Float32Array, experts: readonly number[], rowsPerExpert: number, cols: number): Float32Array {
  const per = rowsPerExpert * cols;
  const out = new Float32Array(experts.length * per);
  experts.forEach((e, j) => out.set(all.subarray(e * per, (e + 1) * per), j * per));
  return out;
}

/** Each expert's count among local slots (-1: none): the grouping's offsets [EL + 1]. */
function offsetsOf(slots: Int32Array, EL: number): number[] {
  const counts = new Array<number>(EL).fill(0);
  for (const s of slots) if (s >= 0) counts[s]!++;
  const out = [0];
  for (const c of counts) out.push(out[out.length - 1]! + c);
  return out;
}

describe('CUDA expert-parallel mixture of experts vs CPU', { skip: noCuda }, () => {
  let cpu: CpuBackend;
  let cuda: CudaBackend;
  before(() => {
    cpu = newCpu();
    cuda = newCuda();
  });
  after(() => {
    cpu?.dispose();
    cuda?.dispose();
  });

  for (const [T, E, k, H, ep, rank, placement] of [[1, 128, 8, 2048, 4, 1, 'linear'], [5, 40, 3, 264, 3, 2, 'round_robin'],
    [64, 128, 8, 256, 8, 7, 'linear'], [MOE_FUSED_ROUTER_MAX_ROWS + 1, 128, 8, 256, 2, 0, 'round_robin']] as const) {
    test(`routing of ${T} rows over ${E} experts, rank ${rank} of ${ep} (${placement}): local slots, grouped over its experts alone`, () => {
      const local = expertParallel(E, rank, ep, placement).local;
      const x = cuda.fromHost([T, H], randomBf16(T * H, 30 + T));
      const router = cuda.fromHost([E, H], randomBf16(E * H, 31 + E, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
      const route: MoeRoute = { topK: k, renormalize: true };
      try {
        for (const maxRows of [MOE_FUSED_ROUTER_MAX_ROWS, 0]) {
          cuda.moe.fusedRouterMaxRows = maxRows;
          beginPoisonedStep(cuda);
          const got = cuda.moe.routerToHost(x, router, route, 64, local);
          const want = routeTokens(got.logits, T, E, route);
          assert.deepEqual(Array.from(got.experts), Array.from(toLocalSlots(want.experts, local)), `slots (fused to ${maxRows} rows)`);
          for (let i = 0; i < T * k; i++) assert.ok(Math.abs(got.weights[i]! - want.weights[i]!) <= 2e-6, `weight ${i}`);
          assert.deepEqual(Array.from(got.offsets), offsetsOf(got.experts, local.count), `offsets (fused to ${maxRows} rows)`);
          const counts = Array.from({ length: local.count }, (_, e) => got.offsets[e + 1]! - got.offsets[e]!);
          for (const { tokens, list } of got.tiles) {
            assert.deepEqual(Array.from(list), Array.from(expertTileList(counts, tokens, list.length / 4)), `tiles of ${tokens}`);
          }
        }
        // moe_route alone (the router GEMM's logits given)
        const logits = bf16ToF32(f32ToBf16(randomBf16(T * E, 50 + T, -4, 4)));
        beginPoisonedStep(cuda);
        const routed = cuda.moe.routeToHost(cuda.fromHost([T, E], logits), route, local);
        assert.deepEqual(Array.from(routed.experts), Array.from(toLocalSlots(routeTokens(logits, T, E, route).experts, local)));
      } finally {
        cuda.moe.fusedRouterMaxRows = 0;
      }
    });
  }

  // [T, E, k, H, I, ep, the variant kind the plan takes]
  for (const [T, E, k, H, I, ep, kind] of [[1, 128, 8, 256, 96, 4, 'split'], [7, 8, 2, 264, 200, 2, 'split'],
    [64, 128, 8, 256, 96, 8, 'split'], [300, 8, 2, 264, 200, 2, 'tiled'], [2048, 128, 8, 128, 64, 4, 'tiled']] as const) {
    test(`moeExperts T ${T}, ${E} experts top ${k} over ${ep} ranks (${kind}): each rank's output the CPU's, their sum the whole layer's`, () => {
      const gateUp = randomBf16(E * 2 * I * H, T + E, -2 / Math.sqrt(H), 2 / Math.sqrt(H));
      const down = randomBf16(E * H * I, T + E + 1, -2 / Math.sqrt(I), 2 / Math.sqrt(I));
      const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, H], randomBf16(T * H, 7 + T));
      const [rc, rg] = uploadBoth(cpu, cuda, 'router', [E, H], pickingRouter(E, H));
      const route: MoeRoute = { topK: k, renormalize: true };
      const run = (experts: readonly number[], local?: LocalExperts): { got: Float32Array; want: Float32Array } => {
        const [gc, gg] = uploadBoth(cpu, cuda, 'gate_up', [experts.length * 2 * I, H], expertRows(gateUp, experts, 2 * I, H));
        const [dc, dg] = uploadBoth(cpu, cuda, 'down', [experts.length * H, I], expertRows(down, experts, H, I));
        const ex = (g: typeof gc, d: typeof dc): MoeExperts => ({ numExperts: E, intermediate: I, gateUp: g, down: d, ...(local ? { local } : {}) });
        cpu.beginStep(oneToken);
        beginPoisonedStep(cuda);
        return { got: cuda.toHost(cuda.moeExperts(xg, rg, ex(gg, dg), route)), want: cpu.toHost(cpu.moeExperts(xc, rc, ex(gc, dc), route)) };
      };
      const placement = T % 2 === 0 ? 'linear' : 'round_robin';
      assert.equal(planMoe(T, E, k, H, I, undefined, 0, false, E / ep).gateUp.variant?.kind, kind);
      const whole = run(Array.from({ length: E }, (_, e) => e)).got;
      const sum = new Float32Array(T * H);
      for (let r = 0; r < ep; r++) {
        const a = expertParallel(E, r, ep, placement);
        const { got, want } = run(a.experts, a.local);
        assertBf16Close(got, want, `rank ${r} (${placement})`);
        got.forEach((v, i) => { sum[i]! += v; });
      }
      // each rank's partial sum rounded to bf16 once, then the all-reduce's sum: near the whole layer's
      assertBf16Close(sum, whole, 'the ranks\' sum', 0.03);
    });
  }

  test('moeExpertsAddRmsNorm with a rank\'s experts: the unfused ops\' bits (rows with none of its experts included)', () => {
    const [T, E, k, H, I] = [7, 16, 2, 264, 96];
    const a = expertParallel(E, 1, 4, 'round_robin');
    const ex: MoeExperts = { numExperts: E, intermediate: I, local: a.local,
      gateUp: cuda.fromHost([a.experts.length * 2 * I, H], randomBf16(a.experts.length * 2 * I * H, 40, -0.1, 0.1)),
      down: cuda.fromHost([a.experts.length * H, I], randomBf16(a.experts.length * H * I, 41, -0.1, 0.1)) };
    const x = cuda.fromHost([T, H], randomBf16(T * H, 42));
    const router = cuda.fromHost([E, H], randomBf16(E * H, 43, -3 / Math.sqrt(H), 3 / Math.sqrt(H)));
    const resValues = randomBf16(T * H, 44, -4, 4);
    const normW = cuda.fromHost([H], randomBf16(H, 45, 0.5, 1.5));
    const route: MoeRoute = { topK: k, renormalize: true };
    beginPoisonedStep(cuda);
    const res1 = cuda.fromHost([T, H], resValues);
    const want = bitsOf(cuda, cuda.addRmsNorm(cuda.moeExperts(x, router, ex, route), res1, normW, 1e-6));
    beginPoisonedStep(cuda);
    const res2 = cuda.fromHost([T, H], resValues);
    const got = bitsOf(cuda, cuda.moeExpertsAddRmsNorm(x, router, ex, route, res2, normW, 1e-6));
    assertSameBits(got, want, 'the normed output');
    assertSameBits(bitsOf(cuda, res2), bitsOf(cuda, res1), 'the residual');
  });
});

const probe = cudaAvailable();
const twoGpus = !probe.ok ? `no CUDA device: ${probe.reason}`
  : probe.numDevices < 2 ? `needs 2 CUDA devices, found ${probe.numDevices}` : false;

/**
 * One engine's greedy transcripts of PROMPTS and, given `seqs` (prompt and tokens), their teacher-forced logprobs (one
 * divergence does not compound, so a wrong expert map shows as a large difference where near-ties only flip tokens).
 */
async function runAndScore(o: Partial<EngineOptions>, dir: string, seqs: number[][] | null):
Promise<{ tokens: number[][]; seqs: number[][]; logprobs: number[][] }> {
  const llm = new LLM(dir, { backend: 'cuda', maxModelLen: 512, ...o });
  try {
    const out = await llm.generate(PROMPTS, { maxTokens: 48, temperature: 0, ignoreEos: true });
    const scoredSeqs = seqs ?? out.map((c) => [...c.promptTokenIds, ...c.tokenIds]);
    const scored = await llm.generate(scoredSeqs, { maxTokens: 1, temperature: 0, promptLogprobs: 0 });
    return { tokens: out.map((c) => c.tokenIds), seqs: scoredSeqs,
      logprobs: scored.map((c) => c.promptLogprobs!.slice(1).map((l) => l!.logprob)) };
  } finally {
    await llm.close();
  }
}

for (const shape of ['tiny-qwen3-moe-128', 'tiny-qwen3-next-128']) {
  test(`-tp 2 --enable-expert-parallel on CUDA (${shape}): -tp 1's transcripts scored about as near as -tp 2 without it ` +
    'scores them; graphs and eager alike', { skip: twoGpus, timeout: 600_000 }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'quire-gpu-ep-'));
    try {
      await makeTestModel({ shape, outDir: dir, dtype: 'bf16', seed: 0 });
      const tp1 = await runAndScore({}, dir, null);
      const seqs = tp1.seqs;
      const tp2 = await runAndScore({ tensorParallelSize: 2 }, dir, seqs);
      const ep = await runAndScore({ tensorParallelSize: 2, enableExpertParallel: true }, dir, seqs);
      const epEager = await runAndScore({ tensorParallelSize: 2, enableExpertParallel: true, enforceEager: true }, dir, seqs);
      const epRoundRobin = await runAndScore({ tensorParallelSize: 2, enableExpertParallel: true,
        expertPlacementStrategy: 'round_robin' }, dir, seqs);
      t.diagnostic(`md5 tp1 ${transcriptMd5(tp1.tokens)}, tp2 ${transcriptMd5(tp2.tokens)}, tp2 ep ${transcriptMd5(ep.tokens)}, ` +
        `tp2 ep eager ${transcriptMd5(epEager.tokens)}, tp2 ep round_robin ${transcriptMd5(epRoundRobin.tokens)}`);
      assert.deepEqual(ep.tokens, epEager.tokens, 'expert parallel in graphs against eager');
      const total = tp1.tokens.flat().length;
      // the mean difference: one routing near-tie (a token's k-th expert flipped) moves a single position a lot
      const diffs = (r: typeof tp1): number[] => r.logprobs.flatMap((row, i) => row.map((lp, k) => Math.abs(lp - tp1.logprobs[i]![k]!)));
      const mean = (r: typeof tp1): number => diffs(r).reduce((a, d) => a + d, 0) / diffs(r).length;
      const runs = [['tp2', tp2], ['ep', ep], ['ep round_robin', epRoundRobin]] as const;
      const found = runs.map(([name, r]) => {
        const same = tp1.tokens.reduce((a, row, i) => a + row.filter((x, j) => x === r.tokens[i]![j]).length, 0);
        const w = mean(r);
        t.diagnostic(`${name}: ${same} of ${total} tokens as -tp 1; -tp 1's transcripts scored ${w.toFixed(4)} away on ` +
          `average (worst ${Math.max(...diffs(r)).toFixed(4)})`);
        return w;
      });
      // expert parallelism changes only the order the experts' outputs are summed in, as -tp 2's split of their width
      // does: its scores are as near -tp 1's (a wrong expert map or a dropped expert is off by far more)
      const bound = Math.max(0.02, 2 * found[0]!);
      for (const [i, w] of found.entries()) assert.ok(w <= bound, `${runs[i]![0]}: scored ${w} away on average, beyond ${bound}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
