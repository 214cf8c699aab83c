// A layer's norms inside its chain GEMMs (CudaBackend.matmulAddRmsNorm; kernels/gemm_chain.cu's ChainNormOut and
// ChainNormIn): the producer's residual gets add_rms_norm's bits; the consumer's outputs are as close to the exact
// result (in f64 on the host, from the residual the GPU wrote) as the norm kernel's path; a consumer that cannot apply
// the norm's scale gets the norm kernel's bits; steps the chain kernels do not take run the unfused ops; qwen3-8b's qkv
// takes the norm on the short split rings (QUIRE_CHAIN_SHORT_RING). Outputs start as NaN (the workspace is poisoned).

import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { CudaBackend, CudaTensor } from '../../src/backend/cuda/cuda-backend.js';
import { chainNormRole, planChainGemm } from '../../src/backend/cuda/gemm-chain.js';
import { tinyConfig } from '../../src/model/random-weights.js';
import { assertBf16Close, assertSameBits, beginPoisonedStep as begin, bitsOf, newCpu, newCuda, noCuda,
  prefillAndDecode, randomBf16 } from './cuda-helpers.js';
import type { Backend, Tensor } from '../../src/backend/backend.js';

const EPS = 1e-6;

/** A weight on the device and on the host. */
interface Weight {
  dev: CudaTensor;
  host: Float32Array;
}

/** rows of a [N, K] weight times v (K), in f64. */
function gemv(w: Float32Array, N: number, K: number, v: Float64Array): Float64Array {
  const out = new Float64Array(N);
  for (let n = 0; n < N; n++) {
    let s = 0;
    for (let k = 0; k < K; k++) s += w[n * K + k]! * v[k]!;
    out[n] = s;
  }
  return out;
}

/** The rms of (actual - exact) over the rms of exact. */
function relError(actual: Float32Array, exact: Float64Array): number {
  let e = 0;
  let r = 0;
  for (let i = 0; i < exact.length; i++) {
    e += (actual[i]! - exact[i]!) ** 2;
    r += exact[i]! ** 2;
  }
  return Math.sqrt(e / r);
}

describe('CUDA norms inside the chain GEMMs', { skip: noCuda }, () => {
  const cuda = noCuda ? null : newCuda();
  after(() => cuda?.dispose());
  const weight = (c: CudaBackend, shape: [number, number], seed: number): Weight => {
    const host = randomBf16(shape[0] * shape[1], seed, -0.05, 0.05);
    return { dev: c.fromHost(shape, host), host };
  };

  /**
   * T tokens through a producer [H, K1] (norm weight [H]) then `consume`, fused and unfused from the same residual:
   * the residuals after, both outputs, and whether the fused producer left its norm to the consumer.
   */
  const pair = (c: CudaBackend, T: number, H: number, K1: number, seed: number, consume: (x: Tensor) => Tensor) => {
    const x = c.fromHost([T, K1], randomBf16(T * K1, seed, -2, 2));
    const w = c.fromHost([H, K1], randomBf16(H * K1, seed + 1, -0.05, 0.05));
    const normHost = randomBf16(H, seed + 2, 0.5, 1.5);
    const normW = c.fromHost([H], normHost);
    const res0 = randomBf16(T * H, seed + 3, -3, 3);
    const runOne = (fused: boolean) => {
      begin(c);
      const residual = c.fromHost([T, H], res0);
      const before = c.numChainGemms;
      const normed = fused ? c.matmulAddRmsNorm(x, w, 'o', null, residual, normW, EPS)
        : c.addRmsNorm(c.matmul(x, w, 'o'), residual, normW, EPS);
      let deferred = false;
      try {
        c.toHost(normed);
      } catch (err) {
        deferred = /norm is left to that GEMM/.test(String(err));
      }
      const out = bitsOf(c, consume(normed));
      return { residual: bitsOf(c, residual), out, deferred, chains: c.numChainGemms - before };
    };
    return { fused: runOne(true), plain: runOne(false), normHost };
  };

  /** Token t's exact norm of the residual the GPU wrote (bits), times the norm weight. */
  const exactNormed = (residual: Uint32Array, t: number, H: number, normHost: Float32Array): Float64Array => {
    const row = new Float32Array(residual.buffer, t * H * 4, H);
    let ss = 0;
    for (const v of row) ss += v * v;
    const inv = 1 / Math.sqrt(ss / H + EPS);
    return Float64Array.from(row, (v, k) => v * inv * normHost[k]!);
  };

  const consumerWeights = new Map<number, { wq: Weight; wg: Weight }>();
  /** qkv-like [4096, H] and gate_up-like [6144, H] weights, made once per H. */
  const consumers = (c: CudaBackend, H: number) => {
    let w = consumerWeights.get(H);
    if (!w) {
      w = { wq: weight(c, [4096, H], 11), wg: weight(c, [6144, H], 12) };
      consumerWeights.set(H, w);
    }
    return w;
  };
  const silu = (g: number) => g / (1 + Math.exp(-g));

  // qwen3-0.6b's shapes: o (gemm_chain_whole_split) into qkv and gate_up + silu (the _s2 rings); a ring producer
  // (hidden 4,096: gemm_chain_s2) into the _p8 rings
  for (const [H, K1, what] of [[1024, 2048, 'whole producer'], [4096, 1024, 'ring producer']] as const) {
    for (const T of [1, 3, 8]) {
      test(`${what}, hidden ${H}, ${T} tokens: residual bits equal, consumers as near the exact result as the norm kernel's path`, () => {
        const c = cuda!;
        const producer = planChainGemm(T, H, K1, c.device.numSMs)!;
        assert.ok(chainNormRole(producer).producer, producer.kernel);
        const { wq, wg } = consumers(c, H);
        const inter = 3072;
        const cases = [
          { label: 'matmul', consume: (x: Tensor) => c.matmul(x, wq.dev, 'qkv'),
            exact: (v: Float64Array) => gemv(wq.host, 4096, H, v) },
          { label: 'matmulSiluMul', consume: (x: Tensor) => c.matmulSiluMul(x, wg.dev),
            exact: (v: Float64Array) => {
              const gu = gemv(wg.host, 2 * inter, H, v);
              return Float64Array.from({ length: inter }, (_, j) => silu(gu[j]!) * gu[inter + j]!);
            } },
        ];
        for (const { label, consume, exact } of cases) {
          const r = pair(c, T, H, K1, 100 * T + H, consume);
          assert.ok(r.fused.deferred, `${label}: the fused producer left its norm to the consumer`);
          assert.ok(!r.plain.deferred);
          assert.equal(r.fused.chains, 2, `${label}: two chain kernels, no norm kernel between`);
          assertSameBits(r.fused.residual, r.plain.residual, `${label}: residual`);
          const width = r.fused.out.length / T;
          const ex = new Float64Array(T * width);
          for (let t = 0; t < T; t++) ex.set(exact(exactNormed(r.fused.residual, t, H, r.normHost)), t * width);
          const fusedErr = relError(new Float32Array(r.fused.out.buffer), ex);
          const plainErr = relError(new Float32Array(r.plain.out.buffer), ex);
          assert.ok(plainErr < 1e-2, `${label}: the norm kernel's path ${plainErr} from the exact result`);
          assert.ok(fusedErr < 1.5 * plainErr, `${label}: fused ${fusedErr} against the norm kernel's ${plainErr}`);
        }
      });
    }
  }

  // QUIRE_CHAIN_SHORT_RING (the default): qwen3-8b's qkv (6,144 x 4,096), whose split _p8 grid would take two waves,
  // consumes the pending norm on the 8-stage split rings (gemm_chain_s2)
  test('a ring producer into qwen3-8b\'s qkv on the short split rings: residual bits equal, qkv near the exact result',
    (t) => {
      const c = cuda!;
      const [H, N] = [4096, 6144];
      const plan = planChainGemm(1, N, H, c.device.numSMs)!;
      const fit = c.device.blocksPerSM('gemm_chain.cu', plan.kernel, plan.block, plan.sharedBytes) * c.device.numSMs;
      if (plan.grid[0] <= fit) return t.skip(`${plan.grid[0]} blocks fit one wave of ${fit} here`);
      const wq = weight(c, [N, H], 13);
      for (const T of [1, 8]) {
        const r = pair(c, T, H, 1024, 300 + T, (x) => c.matmul(x, wq.dev, 'qkv'));
        assert.ok(r.fused.deferred, `${T} tokens: the fused producer left its norm to qkv`);
        assert.equal(r.fused.chains, 2, `${T} tokens: two chain kernels, no norm kernel between`);
        assertSameBits(r.fused.residual, r.plain.residual, `${T} tokens: residual`);
        const ex = new Float64Array(T * N);
        for (let i = 0; i < T; i++) ex.set(gemv(wq.host, N, H, exactNormed(r.fused.residual, i, H, r.normHost)), i * N);
        const fusedErr = relError(new Float32Array(r.fused.out.buffer), ex);
        const plainErr = relError(new Float32Array(r.plain.out.buffer), ex);
        assert.ok(plainErr < 1e-2, `${T} tokens: the norm kernel's path ${plainErr} from the exact result`);
        assert.ok(fusedErr < 1.5 * plainErr, `${T} tokens: fused ${fusedErr} against the norm kernel's ${plainErr}`);
      }
    });

  test('a consumer that cannot apply the scale (gemm_chain_whole) gets the norm kernel\'s bits', () => {
    const c = cuda!;
    const wNarrow = c.fromHost([1024, 1024], randomBf16(1024 * 1024, 21, -0.05, 0.05));
    assert.ok(!chainNormRole(planChainGemm(2, 1024, 1024, c.device.numSMs)!).consumer);
    const r = pair(c, 2, 1024, 2048, 22, (x) => c.matmul(x, wNarrow, 'narrow'));
    assert.ok(r.fused.deferred);
    assertSameBits(r.fused.residual, r.plain.residual, 'residual');
    assertSameBits(r.fused.out, r.plain.out, 'output');
  });

  test('steps of more than 8 tokens run the unfused ops, the same bits', () => {
    const c = cuda!;
    const wq = c.fromHost([4096, 1024], randomBf16(4096 * 1024, 31, -0.05, 0.05));
    const r = pair(c, 9, 1024, 2048, 32, (x) => c.matmul(x, wq, 'qkv'));
    assert.ok(!r.fused.deferred);
    assertSameBits(r.fused.residual, r.plain.residual, 'residual');
    assertSameBits(r.fused.out, r.plain.out, 'output');
  });

  test('hidden 1,024 model: decode logits with the norms in the chains match the CPU backend and the unfused path', () => {
    const config = tinyConfig('qwen3', { hiddenSize: 1024, intermediateSize: 3072, numLayers: 3, numHeads: 16,
      numKvHeads: 8, headDim: 64, vocabSize: 500 });
    const backends: Backend[] = [];
    const run = (backend: Backend) => {
      backends.push(backend);
      return prefillAndDecode(config, backend, 5).out;
    };
    try {
      const fusedBackend = newCuda();
      const fused = run(fusedBackend);
      const chains = fusedBackend.numChainGemms;
      const plain = run(newCuda({ chainNorms: false }));
      const cpu = run(newCpu());
      fused.forEach((logits, i) => {
        assertBf16Close(logits, cpu[i]!, `step ${i} against the CPU backend`, 0.05);
        assertBf16Close(logits, plain[i]!, `step ${i} against the unfused path`, 0.05);
      });
      assert.deepEqual(fused[0], plain[0], 'the prompt step (107 tokens) is unfused: the same bits');
      assert.notDeepEqual(fused[3], plain[3], 'decode steps took the fused path (other roundings)');
      assert.ok(chains > 0);
    } finally {
      backends.forEach((b) => b.dispose());
    }
  });
});
