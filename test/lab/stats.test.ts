import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  describe,
  differenceMethodTokensPerS,
  interTokenGapsMs,
  mean,
  percentile,
  ratioAcrossRounds,
  stddev,
  tpotMs,
} from '../../src/lab/stats.js';

const close = (a: number, b: number, eps = 1e-9) => assert.ok(Math.abs(a - b) < eps, `${a} != ${b}`);

test('percentiles interpolate linearly between ranks, as numpy does', () => {
  const ttftMs = [50, 15, 40, 20, 35];
  close(percentile(ttftMs, 40), 29);
  close(percentile(ttftMs, 50), 35);
  close(percentile(ttftMs, 90), 46);
  close(percentile(ttftMs, 99), 49.6);
  close(percentile(ttftMs, 0), 15);
  close(percentile(ttftMs, 100), 50);
  close(percentile([7], 99), 7);
  assert.ok(Number.isNaN(percentile([], 50)));
  assert.throws(() => percentile(ttftMs, 101), RangeError);
});

test('mean and population stddev', () => {
  const xs = [15, 20, 35, 40, 50];
  close(mean(xs), 32);
  close(stddev(xs), Math.sqrt(166));
  const d = describe(xs);
  assert.equal(d.count, 5);
  assert.equal(d.min, 15);
  assert.equal(d.max, 50);
  close(d.p90, 46);
});

test('TPOT excludes the first token; one token has no TPOT', () => {
  close(tpotMs(1100, 100, 11)!, 100);
  assert.equal(tpotMs(300, 100, 1), null);
});

test('inter-token gaps from arrival times', () => {
  assert.deepEqual(interTokenGapsMs([0, 10, 25, 45]), [10, 15, 20]);
  assert.deepEqual(interTokenGapsMs([3]), []);
});

test('difference method: extra tokens over extra time', () => {
  close(differenceMethodTokensPerS(4, 64, 1000, 320, 3560), 400);
  close(differenceMethodTokensPerS(1, 64, 500, 320, 1780), 200);
  assert.throws(() => differenceMethodTokensPerS(1, 320, 1000, 64, 2000), RangeError);
  assert.throws(() => differenceMethodTokensPerS(1, 64, 2000, 320, 1000), RangeError);
});

test('ratio per round with median, min, max and relative spread', () => {
  const r = ratioAcrossRounds([100, 200, 100], [150, 260, 140]);
  r.perRound.forEach((x, i) => close(x, [1.5, 1.3, 1.4][i]!));
  close(r.median, 1.4);
  close(r.min, 1.3);
  close(r.max, 1.5);
  close(r.relativeSpread, 0.2 / 1.4);
  assert.throws(() => ratioAcrossRounds([1, 2], [1]), RangeError);
});
