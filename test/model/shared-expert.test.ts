// The shared expert of Qwen3-Next and Qwen3.5-MoE on the CPU backend: its gated add (Backend.addSigmoidGated)
// against its formula, and a sparse layer with a shared expert against plain loops: the routed experts' weighted sum
// plus sigmoid(x g^T) times the shared SwiGLU MLP, as transformers' Qwen2MoeSparseMoeBlock computes it.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { CpuBackend } from '../../src/backend/cpu/cpu-backend.js';
import { routeTokens } from '../../src/backend/moe-route.js';
import { SparseMoe } from '../../src/model/layers/moe.js';
import { hostF32, randomArray } from '../backend/helpers.js';

const backend = new CpuBackend({ kvCacheBytes: 1 << 20, numThreads: 1 });
after(() => backend.dispose());
const up = (name: string, shape: number[], v: Float32Array) => backend.upload(hostF32(name, shape, v));
const sigmoid = (v: number) => 1 / (1 + Math.exp(-v));

test('addSigmoidGated: acc[t] += sigmoid(gate[t]) * y[t], in place, f32: the gate and each product rounded once', () => {
  const [T, N] = [5, 7];
  const acc = randomArray(T * N, 1), gate = randomArray(T, 2, -6, 6), y = randomArray(T * N, 3);
  backend.beginStep({ numTokens: T } as never);
  const a = up('acc', [T, N], acc.slice());
  backend.addSigmoidGated(a, up('gate', [T, 1], gate), up('y', [T, N], y));
  const want = Float32Array.from(acc, (v, i) => v + Math.fround(Math.fround(sigmoid(gate[Math.floor(i / N)]!)) * y[i]!));
  assert.deepEqual(backend.toHost(a), want);
  assert.throws(() => backend.addSigmoidGated(a, up('g2', [T - 1, 1], gate.subarray(1)), up('y2', [T, N], y)), /addSigmoidGated: acc \[5, 7\], gate \[4, 1\]/);
});

test('a sparse layer with a shared expert: the routed experts\' weighted sum plus sigmoid(x g^T) times the shared SwiGLU MLP', () => {
  const [T, H, E, I, Is, k] = [6, 16, 4, 8, 12, 2];
  const x = randomArray(T * H, 10);
  const [router, gu, dn] = [randomArray(E * H, 11), randomArray(E * 2 * I * H, 12, -0.5, 0.5), randomArray(E * H * I, 13, -0.5, 0.5)];
  const [sgu, sdn, sg] = [randomArray(2 * Is * H, 14, -0.5, 0.5), randomArray(H * Is, 15, -0.5, 0.5), randomArray(H, 16)];
  const layer = new SparseMoe(up('r', [E, H], router), { numExperts: E, intermediate: I, gateUp: up('gu', [E * 2 * I, H], gu),
    down: up('d', [E * H, I], dn) }, { topK: k, renormalize: false },
  { gateUp: up('sgu', [2 * Is, H], sgu), down: up('sd', [H, Is], sdn), gate: up('sg', [1, H], sg) });
  const step = backend.beginStep({ numTokens: T } as never);
  const out = layer.forward(up('x', [T, H], x), { backend, step, eps: 1e-6, tp: null });
  assert.ok('output' in out, 'with a shared expert the layer computes its output itself');
  const got = backend.toHost(out.output);
  const dot = (w: Float32Array, row: number, v: ArrayLike<number>, n: number, off = 0) => {
    let s = 0;
    for (let i = 0; i < n; i++) s += w[row * n + i]! * v[off + i]!;
    return s;
  };
  const swiglu = (gateUp: Float32Array, down: Float32Array, e: number, width: number, t: number) => {
    const act = Array.from({ length: width }, (_, i) => {
      const g = dot(gateUp, e * 2 * width + i, x, H, t * H);
      return g * sigmoid(g) * dot(gateUp, e * 2 * width + width + i, x, H, t * H);
    });
    return Array.from({ length: H }, (_, h) => dot(down, e * H + h, act, width));
  };
  const logits = Float32Array.from({ length: T * E }, (_, i) => dot(router, i % E, x, H, Math.floor(i / E) * H));
  const { experts, weights } = routeTokens(logits, T, E, { topK: k, renormalize: false });
  for (let t = 0; t < T; t++) {
    const shared = swiglu(sgu, sdn, 0, Is, t);
    const gate = sigmoid(dot(sg, 0, x, H, t * H));
    const want = shared.map((s) => gate * s);
    for (let j = 0; j < k; j++) {
      const routed = swiglu(gu, dn, experts[t * k + j]!, I, t);
      routed.forEach((v, h) => (want[h]! += weights[t * k + j]! * v));
    }
    for (let h = 0; h < H; h++) assert.ok(Math.abs(got[t * H + h]! - want[h]!) < 1e-5, `row ${t} channel ${h}: ${got[t * H + h]} vs ${want[h]}`);
  }
  // the roofline reads the shared expert whole, the routed ones by share
  const reads = layer.weightsRead();
  assert.ok(reads.includes(layer.shared!.gateUp) && reads.includes(layer.shared!.down) && reads.includes(layer.shared!.gate));
});
