import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultInvFreq, defaultMaxModelLen, llama3InvFreq, ropeAttentionFactor, ropeInvFreq, rotateHalf } from '../../src/model/rope.js';
import type { Llama3RopeScaling, YarnRopeScaling } from '../../src/loader/types.js';
import { tinyConfig } from '../../src/model/random-weights.js';

function assertNear(actual: ArrayLike<number>, expected: ArrayLike<number>, relTol: number): void {
  assert.equal(actual.length, expected.length);
  Array.from(expected).forEach((e, i) => assert.ok(Math.abs(actual[i]! - e) <= relTol * Math.abs(e), `[${i}] ${actual[i]} vs ${e}`));
}

test('default inverse frequencies are theta^(-2i/d)', () => {
  assertNear(defaultInvFreq(8, 10000), [1, 0.1, 0.01, 0.001], 1e-6);
  assertNear(defaultInvFreq(4, 1e6), [1, 1e-3], 1e-6);
});

test('llama3 scaling keeps high frequencies, divides low ones by factor, blends the band between', () => {
  // d=8, theta=1e4 -> wavelengths 2pi/f = 6.28, 62.8, 628, 6283; low/high cut-offs 64/1 = 64 and 64/4 = 16.
  // f=0.1 lies in the band: smooth = (64 / 62.83 - 1) / (4 - 1) = 0.0061972;
  // (1 - smooth) * 0.1 / 8 + smooth * 0.1 = 0.0130423.
  const scaled = llama3InvFreq(defaultInvFreq(8, 10000),
    { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 });
  assertNear(scaled, [1, 0.013042256, 0.00125, 0.000125], 1e-6);
});

test('ropeInvFreq applies scaling only when the config asks for it', () => {
  const llama = tinyConfig('llama');
  const qwen = tinyConfig('qwen3');
  assert.deepEqual(ropeInvFreq(qwen), defaultInvFreq(qwen.headDim, qwen.ropeTheta));
  assert.deepEqual(ropeInvFreq(llama), llama3InvFreq(defaultInvFreq(llama.headDim, llama.ropeTheta), llama.ropeScaling as Llama3RopeScaling));
  assert.notDeepEqual(ropeInvFreq(llama), defaultInvFreq(llama.headDim, llama.ropeTheta));
});

test('yarn: fast dimensions kept, slow ones divided by factor, a ramp between; q and k scaled by the attention factor', () => {
  const yarn: YarnRopeScaling = { type: 'yarn', factor: 4, originalMaxPositionEmbeddings: 1024, betaFast: 32, betaSlow: 1,
    attentionFactor: 0.1 * Math.log(4) + 1, truncate: true };
  const config = tinyConfig('qwen3', { headDim: 16, ropeTheta: 1e6, ropeScaling: yarn });
  const plain = defaultInvFreq(16, 1e6);
  const inv = ropeInvFreq(config);
  // correction range: floor(16 ln(1024 / 64 pi) / 2 ln 1e6) = 0 .. ceil(16 ln(1024 / 2 pi) / 2 ln 1e6) = 3
  assertNear(inv.subarray(0, 1), plain.subarray(0, 1), 1e-7);
  assertNear(inv.subarray(3), plain.subarray(3).map((f) => f / 4), 1e-7);
  for (const i of [1, 2]) {
    const ramp = i / 3;
    assert.ok(Math.abs(inv[i]! - (plain[i]! / 4 * ramp + plain[i]! * (1 - ramp))) < 1e-6 * plain[i]!, `dim ${i} blended`);
  }
  assert.equal(ropeAttentionFactor(config), yarn.attentionFactor);
  assert.equal(ropeAttentionFactor(tinyConfig('qwen3')), 1);
  const linear = tinyConfig('qwen3', { ropeScaling: { type: 'linear', factor: 2 } });
  assertNear(ropeInvFreq(linear), defaultInvFreq(linear.headDim, linear.ropeTheta).map((f) => f / 2), 1e-9);
});

test('rotateHalf is x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1)', () => {
  const x = Float32Array.from([0.5, -1, 2, 0.25]);
  const invFreq = Float32Array.from([1, 0.1]);
  const pos = 3;
  const [c0, s0, c1, s1] = [Math.cos(3), Math.sin(3), Math.cos(Math.fround(0.3)), Math.sin(Math.fround(0.3))];
  assertNear(rotateHalf(x, pos, invFreq), [0.5 * c0 - 2 * s0, -1 * c1 - 0.25 * s1, 2 * c0 + 0.5 * s0, 0.25 * c1 + -1 * s1], 1e-6);
  assert.deepEqual(rotateHalf(x, 0, invFreq), x);
});

test('the default max model len follows the scaling as vLLM derives it', () => {
  const yarn: YarnRopeScaling = { type: 'yarn', factor: 4, originalMaxPositionEmbeddings: 32768, betaFast: 32, betaSlow: 1,
    attentionFactor: 1.14, truncate: true };
  assert.equal(defaultMaxModelLen(tinyConfig('qwen3', { maxPositionEmbeddings: 40960, ropeScaling: yarn })), 131072);
  assert.equal(defaultMaxModelLen(tinyConfig('llama', { maxPositionEmbeddings: 4096, ropeScaling: { type: 'linear', factor: 2 } })), 8192);
  assert.equal(defaultMaxModelLen(tinyConfig('llama', { maxPositionEmbeddings: 131072 })), 131072, 'llama3 scaling: as configured');
  assert.equal(defaultMaxModelLen(tinyConfig('qwen3', { maxPositionEmbeddings: 40960 })), 40960);
  assert.equal(defaultMaxModelLen(tinyConfig('llama', { maxPositionEmbeddings: 32768, slidingWindow: 4096 })), 4096, 'a sliding window caps it');
});
