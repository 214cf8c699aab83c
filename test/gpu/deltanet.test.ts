// The CUDA gated DeltaNet ops (kernels/deltanet.cu) against the CPU reference on the same bf16 inputs, over steps that
// carry each sequence's state in its slot: prompt chunks from position 0 and continuing ones, decode rows, a padding
// row with no slot, two layers' states side by side, and copyRecurrentState. The workspace is poisoned (NaN) at
// each step, so an output never written shows.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { DeltaNetShape, Tensor } from '../../src/backend/backend.js';
import { convChannels } from '../../src/backend/backend.js';
import type { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import type { CudaBackend } from '../../src/backend/cuda/cuda-backend.js';
import { hostF32, seqBatch } from '../backend/helpers.js';
import { assertBf16Close, bitsOf, newCpu, newCuda, noCuda, randomBf16, uploadBoth } from './cuda-helpers.js';

// Qwen3.5's layer (Dk = Dv = 128, 3 v heads a k head), a Dv that no warp's columns divide (Dk 64: 16 columns a
// warp), and the smallest key dim the kernel takes
const SHAPES: { name: string; shape: DeltaNetShape }[] = [
  { name: 'Dk 128, Dv 128', shape: { numKeyHeads: 2, numValueHeads: 6, keyDim: 128, valueDim: 128, convKernel: 4 } },
  { name: 'Dk 64, Dv 40', shape: { numKeyHeads: 2, numValueHeads: 4, keyDim: 64, valueDim: 40, convKernel: 4 } },
  { name: 'Dk 32, Dv 8, 3 taps', shape: { numKeyHeads: 1, numValueHeads: 2, keyDim: 32, valueDim: 8, convKernel: 3 } },
];

// every case on f32 states and on bf16 ones (--mamba-ssm-cache-dtype bfloat16: the kernels' _sbf16 builds; the CPU
// rounds its states as they are kept), and with every sequence of 2 tokens or more on the chunked rule
// (deltanet_chunked.cu, chunks of 64 and of 32, on CUDA cores and on tensor cores: within rounding of the recurrence)
const VARIANTS = [['f32', 0, 64, false], ['bf16', 0, 64, false], ['f32', 2, 64, false], ['bf16', 2, 32, false],
  ['f32', 2, 32, true], ['bf16', 2, 64, true]] as const;
for (const [ssmCacheDtype, chunkedFrom, chunk, mma] of VARIANTS) {
  const chunks = chunkedFrom > 0 ? `, chunks of ${chunk}${mma ? ' on tensor cores' : ''}` : '';
  const states = `${ssmCacheDtype === 'bf16' ? ', bf16 states' : ''}${chunks}`;
  describe(`CUDA gated DeltaNet vs CPU${states}`, { skip: noCuda }, () => {
    let cpu: CpuBackend;
    let cuda: CudaBackend;

    before(() => {
      cpu = newCpu({ ssmCacheDtype });
      cuda = newCuda({ ssmCacheDtype, deltanetChunkedFrom: chunkedFrom, deltanetChunk: chunk,
        deltanetChunkedMma: mma });
    });
    after(() => {
      cpu?.dispose();
      cuda?.dispose();
    });

    for (const { name, shape } of SHAPES) {
      describe(name, () => {
        const C = convChannels(shape);
        const Hv = shape.numValueHeads;
        const K = shape.convKernel;
        let weights: { w: [Tensor, Tensor][]; aLog: [Tensor, Tensor][]; dtBias: [Tensor, Tensor][] };
        let seed = 100;

        before(() => {
          cpu.allocateRecurrentState({ numSlots: 4, numLayers: 2, shape });
          cuda.allocateRecurrentState({ numSlots: 4, numLayers: 2, shape });
          weights = { w: [], aLog: [], dtBias: [] };
          for (let l = 0; l < 2; l++) {
            weights.w.push(uploadBoth(cpu, cuda, 'conv', [C, K], randomBf16(C * K, 10 + l, -0.6, 0.6)));
            weights.aLog.push(uploadBoth(cpu, cuda, 'A_log', [Hv], randomBf16(Hv, 20 + l, -1, 1)));
            weights.dtBias.push(uploadBoth(cpu, cuda, 'dt_bias', [Hv], randomBf16(Hv, 30 + l, -1, 1)));
          }
        });

        /** One step of layer `layer` on both backends: its conv outputs, then the rule's on the GPU's conv (bf16). */
        const step = (seqs: { n: number; start: number; slot: number }[], layer: number) => {
          const batch = seqBatch(seqs);
          const T = batch.numTokens;
          const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, C], randomBf16(T * C, seed++, -2, 2));
          const [bac, bag] = uploadBoth(cpu, cuda, 'ba', [T, 2 * Hv], randomBf16(T * 2 * Hv, seed++, -3, 3));
          const [sc, sg] = [cpu.beginStep(batch), cuda.beginStep(batch)];
          cuda.fillWorkspace(0xff);
          const convG = cuda.toHost(cuda.causalConv1d(xg, weights.w[layer]![1], layer, sg));
          const convC = cpu.toHost(cpu.causalConv1d(xc, weights.w[layer]![0], layer, sc));
          assertBf16Close(convG, convC, `causalConv1d layer ${layer}`);
          const [cc, cg] = uploadBoth(cpu, cuda, 'conv', [T, C], convG);
          const ruleG = cuda.gatedDeltaRule(cg, bag, weights.aLog[layer]![1], weights.dtBias[layer]![1], shape, layer,
            sg);
          const ruleC = cpu.gatedDeltaRule(cc, bac, weights.aLog[layer]![0], weights.dtBias[layer]![0], shape, layer,
            sc);
          const outG = cuda.toHost(ruleG);
          assertBf16Close(outG, cpu.toHost(ruleC), `gatedDeltaRule layer ${layer}`);
          return { outG, bits: bitsOf(cuda, ruleG) };
        };

        test('prompt chunks, decode rows and a padding row, each state carried in its slot, two layers apart', () => {
          // a 7-token prompt (slot 2), a 1-token prompt (slot 0), a padding row (no slot)
          step([{ n: 7, start: 0, slot: 2 }, { n: 1, start: 0, slot: 0 }, { n: 1, start: 0, slot: -1 }], 0);
          step([{ n: 7, start: 0, slot: 2 }, { n: 1, start: 0, slot: 0 }, { n: 1, start: 0, slot: -1 }], 1);
          // the prompt continues (its window and state read back), slot 0 decodes, a new prompt starts in slot 1
          step([{ n: 1, start: 1, slot: 0 }, { n: 5, start: 7, slot: 2 }, { n: 3, start: 0, slot: 1 }], 0);
          // decode rows only, the order of the slots shuffled; then a long chunk (several warps' worth of tokens)
          step([{ n: 1, start: 3, slot: 1 }, { n: 1, start: 12, slot: 2 }, { n: 1, start: 2, slot: 0 }], 0);
          step([{ n: 40, start: 13, slot: 2 }, { n: 1, start: 7, slot: 1 }], 1);
        });

        test('long prompts over several chunks of 64 (a last one partial), from 0 and continuing, beside decode rows',
          () => {
          step([{ n: 150, start: 0, slot: 1 }, { n: 1, start: 0, slot: 0 }, { n: 65, start: 0, slot: 3 }], 0);
          step([{ n: 1, start: 1, slot: 0 }, { n: 70, start: 150, slot: 1 }, { n: 1, start: 65, slot: 3 }], 0);
          step([{ n: 1, start: 220, slot: 1 }, { n: 1, start: 2, slot: 0 }], 0);
        });

        test('a slot restarted at position 0 reads zeros, not what it held', () => {
          step([{ n: 4, start: 0, slot: 3 }], 0);
          step([{ n: 4, start: 0, slot: 3 }], 0);
        });

        test('copyRecurrentState: the copy continues exactly as its source', () => {
          step([{ n: 6, start: 0, slot: 1 }], 0);
          cpu.copyRecurrentState(1, 3);
          cuda.copyRecurrentState(1, 3);
          // the same input rows for both sequences: the same bits from the copy as from the source
          const batch = seqBatch([{ n: 2, start: 6, slot: 1 }, { n: 2, start: 6, slot: 3 }]);
          const row = randomBf16(2 * C, seed++, -2, 2);
          const x = new Float32Array(4 * C);
          x.set(row, 0);
          x.set(row, 2 * C);
          const ba = randomBf16(2 * 2 * Hv, seed++, -3, 3);
          const bas = new Float32Array(4 * 2 * Hv);
          bas.set(ba, 0);
          bas.set(ba, 2 * 2 * Hv);
          const [xc, xg] = uploadBoth(cpu, cuda, 'x', [4, C], x);
          const [bac, bag] = uploadBoth(cpu, cuda, 'ba', [4, 2 * Hv], bas);
          const [sc, sg] = [cpu.beginStep(batch), cuda.beginStep(batch)];
          cuda.fillWorkspace(0xff);
          const convG = cuda.causalConv1d(xg, weights.w[0]![1], 0, sg);
          const ruleG = cuda.gatedDeltaRule(convG, bag, weights.aLog[0]![1], weights.dtBias[0]![1], shape, 0, sg);
          const bits = bitsOf(cuda, ruleG);
          const n = 2 * Hv * shape.valueDim;
          assert.deepEqual(bits.subarray(n), bits.subarray(0, n), 'the copied slot gave other bits than its source');
          const ruleC = cpu.gatedDeltaRule(cpu.causalConv1d(xc, weights.w[0]![0], 0, sc), bac, weights.aLog[0]![0],
            weights.dtBias[0]![0], shape, 0, sc);
          assertBf16Close(cuda.toHost(ruleG), cpu.toHost(ruleC), 'gatedDeltaRule after the copy', 3e-2);
        });

        test('a chunk\'s conv (a thread per token, then the window update) gives the bits of its tokens one by one',
          () => {
          // slot 1 takes 3 tokens (a window to read), is copied to slot 3; then 9 more tokens: slot 1 as one chunk
          // beside a decode row, slot 3 a token a step (the decode kernel); the outputs and, through a last token, the
          // windows left behind must agree bit for bit
          const conv = (seqs: { n: number; start: number; slot: number }[], x: Float32Array) => {
            const batch = seqBatch(seqs);
            const [, xg] = uploadBoth(cpu, cuda, 'x', [batch.numTokens, C], x);
            const sg = cuda.beginStep(batch);
            cuda.fillWorkspace(0xff);
            return bitsOf(cuda, cuda.causalConv1d(xg, weights.w[0]![1], 0, sg));
          };
          conv([{ n: 3, start: 0, slot: 1 }], randomBf16(3 * C, seed++, -2, 2));
          cuda.copyRecurrentState(1, 3);
          const rows = randomBf16(9 * C, seed++, -2, 2);
          const other = randomBf16(C, seed++, -2, 2);
          const x = new Float32Array(10 * C);
          x.set(other, 0);
          x.set(rows, C);
          const chunk = conv([{ n: 1, start: 0, slot: 0 }, { n: 9, start: 3, slot: 1 }], x).subarray(C);
          for (let i = 0; i < 9; i++) {
            const one = conv([{ n: 1, start: 3 + i, slot: 3 }], rows.subarray(i * C, (i + 1) * C));
            assert.deepEqual(one, chunk.subarray(i * C, (i + 1) * C), `token ${i}`);
          }
          const last = randomBf16(C, seed++, -2, 2);
          const both = new Float32Array(2 * C);
          both.set(last, 0);
          both.set(last, C);
          const after = conv([{ n: 1, start: 12, slot: 1 }, { n: 1, start: 12, slot: 3 }], both);
          assert.deepEqual(after.subarray(C), after.subarray(0, C), 'the windows the chunk and the single tokens left');
        });

        test('conv, rule and gated norm on columns of one wider tensor (Backend.columns) give the bits of contiguous '
          + 'inputs', () => {
          const Z = Hv * shape.valueDim;
          const W = C + Z + 2 * Hv + 5;  // 5 columns the ops must not read
          const T = 6;
          const all = randomBf16(T * W, seed++, -2, 2);
          const part = (start: number, width: number) =>
            Float32Array.from({ length: T * width }, (_, i) => all[Math.floor(i / width) * W + start + (i % width)]!);
          const run = (views: boolean, slot: number) => {
            const [, wide] = uploadBoth(cpu, cuda, 'all', [T, W], all);
            const pick = (start: number, width: number) =>
              views ? cuda.columns(wide, start, width)
                : uploadBoth(cpu, cuda, 'part', [T, width], part(start, width))[1];
            const [x, z, ba] = [pick(0, C), pick(C, Z), pick(C + Z, 2 * Hv)];
            const sg = cuda.beginStep(seqBatch([{ n: 2, start: 0, slot }, { n: 4, start: 0, slot: slot + 1 }]));
            cuda.fillWorkspace(0xff);
            const conv = cuda.causalConv1d(x, weights.w[0]![1], 0, sg);
            const rule = cuda.gatedDeltaRule(conv, ba, weights.aLog[0]![1], weights.dtBias[0]![1], shape, 0, sg);
            const [, wn] = uploadBoth(cpu, cuda, 'norm', [shape.valueDim], randomBf16(shape.valueDim, 77, 0.5, 1.5));
            return [conv, rule, cuda.rmsNormGated(rule, z, wn, 1e-6)].map((t) => bitsOf(cuda, t));
          };
          assert.deepEqual(run(true, 0), run(false, 2));
          const [, wide] = uploadBoth(cpu, cuda, 'all', [T, W], all);
          assert.throws(() => cuda.sigmoidMul(cuda.columns(wide, 0, 8), cuda.columns(wide, 8, 8)), /column view/);
        });

        test('a state slot or layer outside those allocated is an error', () => {
          assert.throws(() => cuda.copyRecurrentState(0, 4), /outside the 4 allocated/);
          const batch = seqBatch([{ n: 1, start: 0, slot: 0 }]);
          const [, xg] = uploadBoth(cpu, cuda, 'x', [1, C], randomBf16(C, 1));
          const sg = cuda.beginStep(batch);
          assert.throws(() => cuda.causalConv1d(xg, weights.w[0]![1], 2, sg), /recurrent layer 2 outside the 2/);
          const [, bag] = uploadBoth(cpu, cuda, 'ba', [1, 2 * Hv], randomBf16(2 * Hv, 2));
          assert.throws(() => cuda.gatedDeltaRule(xg, bag, weights.aLog[0]![1], weights.dtBias[0]![1],
            { ...shape, convKernel: K + 1 }, 0, sg), /the states hold/);
        });
      });
    }

    for (const { name, shape } of chunkedFrom > 0 ? [] : SHAPES) {
      test(`${name}${states}: a decode step's conv, rule and gated norm in one launch (deltanetFusedDecode), and the `
        + 'rule and norm alone in one (deltanetFusedNorm), and the rule on the wide build for '
        + 'decode rows (also in mixed steps, in two launches or one) and for every sequence (deltanetWideMaxTokens 1, '
        + '2^30), give deltanet_recurrent\'s bits, step after step', () => {
        const C = convChannels(shape);
        const [Hv, Dv, K] = [shape.numValueHeads, shape.valueDim, shape.convKernel];
        // the chunked rule (on by default from 64 tokens) off: its bits are not the recurrence's
        const base = { ssmCacheDtype, deltanetChunkedFrom: 0 };
        const recurrent = { ...base, deltanetWideMaxTokens: 0 };
        const backends = [newCuda(recurrent), newCuda({ ...recurrent, deltanetFusedNorm: true }),
          newCuda({ ...recurrent, deltanetFusedDecode: true }),
          newCuda({ ...base, deltanetWideMaxTokens: 1, deltanetOneLaunch: false }),
          newCuda({ ...base, deltanetWideMaxTokens: 2 ** 30 }),
          newCuda({ ...base, deltanetWideMaxTokens: 1, deltanetOneLaunch: true })];
        try {
          let seed = 500;
          const inputs = (T: number) => ({ x: randomBf16(T * C, seed++, -2, 2),
            ba: randomBf16(T * 2 * Hv, seed++, -3, 3),
            z: randomBf16(T * Hv * Dv, seed++, -3, 3) });
          const [convW, aLog, dtBias, wn] = [randomBf16(C * K, 4, -0.6, 0.6), randomBf16(Hv, 1, -1, 1),
            randomBf16(Hv, 2, -1, 1), randomBf16(Dv, 3, 0.5, 1.5)];
          // a prompt (not a decode step: separate launches everywhere), then decode steps that read the windows and
          // states the ones before wrote: a padding row, a one-token prompt at position 0 (zeros read, a window
          // written), the rows in another order
          const steps = [[{ n: 5, start: 0, slot: 1 }, { n: 3, start: 0, slot: 3 }],
            [{ n: 1, start: 5, slot: 1 }, { n: 1, start: 3, slot: 3 }, { n: 1, start: 0, slot: -1 }],
            [{ n: 1, start: 4, slot: 3 }, { n: 1, start: 0, slot: 2 }, { n: 1, start: 6, slot: 1 }],
            [{ n: 1, start: 1, slot: 2 }, { n: 1, start: 7, slot: 1 }, { n: 1, start: 5, slot: 3 }],
            // a mixed step (a continuing prompt chunk between decode rows: two launches of the rule on the wide
            // build for decode rows), then a decode step on what it left
            [{ n: 1, start: 2, slot: 2 }, { n: 4, start: 8, slot: 1 }, { n: 1, start: 6, slot: 3 }],
            [{ n: 1, start: 12, slot: 1 }, { n: 1, start: 3, slot: 2 }, { n: 1, start: 7, slot: 3 }]]
            .map((seqs) => ({ seqs, ...inputs(seqs.reduce((a, q) => a + q.n, 0)) }));
          const outs = backends.map((b) => {
            b.allocateRecurrentState({ numSlots: 4, numLayers: 1, shape });
            const up = (name: string, dims: number[], v: Float32Array) => b.upload(hostF32(name, dims, v));
            const [w, a, d, n] = [up('conv', [C, K], convW), up('A_log', [Hv], aLog), up('dt_bias', [Hv], dtBias),
              up('norm', [Dv], wn)];
            return steps.map(({ seqs, x, ba, z }) => {
              const batch = seqBatch(seqs);
              const T = batch.numTokens;
              const sg = b.beginStep(batch);
              b.fillWorkspace(0xff);
              const conv = b.causalConv1d(up('x', [T, C], x), w, 0, sg);
              const gate = { z: up('z', [T, Hv * Dv], z), w: n, eps: 1e-6 };
              return bitsOf(b, b.gatedDeltaRule(conv, up('ba', [T, 2 * Hv], ba), a, d, shape, 0, sg, gate));
            });
          });
          assert.deepEqual(outs[1], outs[0], 'rule + norm in one launch');
          assert.deepEqual(outs[2], outs[0], 'conv + rule + norm in one launch');
          assert.deepEqual(outs[3], outs[0], 'decode rows on deltanet_recurrent_wide');
          assert.deepEqual(outs[4], outs[0], 'every sequence on deltanet_recurrent_wide');
          assert.deepEqual(outs[5], outs[0], 'the mixed step in one launch (deltanet_recurrent_mixed)');
        } finally {
          backends.forEach((b) => b.dispose());
        }
      });
    }

    for (const G of [128, 40]) {
      test(`rmsNormGated, groups of ${G}`, () => {
        const T = 5;
        const N = 3 * G;
        const batch = seqBatch([{ n: T, start: 0, slot: -1 }]);
        const [xc, xg] = uploadBoth(cpu, cuda, 'x', [T, N], randomBf16(T * N, 1 + G, -3, 3));
        const [zc, zg] = uploadBoth(cpu, cuda, 'z', [T, N], randomBf16(T * N, 2 + G, -3, 3));
        const [wc, wg] = uploadBoth(cpu, cuda, 'w', [G], randomBf16(G, 3 + G, 0.5, 1.5));
        cpu.beginStep(batch);
        cuda.beginStep(batch);
        cuda.fillWorkspace(0xff);
        assertBf16Close(cuda.toHost(cuda.rmsNormGated(xg, zg, wg, 1e-6)),
          cpu.toHost(cpu.rmsNormGated(xc, zc, wc, 1e-6)),
          'rmsNormGated');
      });
    }
  });
}
