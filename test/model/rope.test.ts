import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultInvFreq, llama3InvFreq, ropeInvFreq, rotateHalf } from '../../src/model/rope.js';
import { tinyConfig } from '../../src/model/random-weights.js';

function assertNear(actual: ArrayLike<number>, expected: number[], relTol: number): void {
  assert.equal(actual.length, expected.length);
  expected.forEach((e, i) => assert.ok(Math.abs(actual[i]! - e) <= relTol * Math.abs(e), `[${i}] ${actual[i]} vs ${e}`));
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
  assert.deepEqual(ropeInvFreq(llama), llama3InvFreq(defaultInvFreq(llama.headDim, llama.ropeTheta), llama.ropeScaling!));
  assert.notDeepEqual(ropeInvFreq(llama), defaultInvFreq(llama.headDim, llama.ropeTheta));
});

test('rotateHalf is x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1)', () => {
  const x = Float32Array.from([0.5, -1, 2, 0.25]);
  const invFreq = Float32Array.from([1, 0.1]);
  const pos = 3;
  const [c0, s0, c1, s1] = [Math.cos(3), Math.sin(3), Math.cos(Math.fround(0.3)), Math.sin(Math.fround(0.3))];
  assertNear(rotateHalf(x, pos, invFreq), [0.5 * c0 - 2 * s0, -1 * c1 - 0.25 * s1, 2 * c0 + 0.5 * s0, 0.25 * c1 + -1 * s1], 1e-6);
  assert.deepEqual(rotateHalf(x, 0, invFreq), x);
});
