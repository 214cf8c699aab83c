// The decode attention split plan (what makes a decode row's output independent
// of its batch): every split non-empty, the splits tile [0, kvLen), and the
// grid's z extent follows the batch without ever exceeding what a row needs.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DECODE_MMA_HEAD_DIMS, DECODE_MMA_MIN_GROUP, type DecodeMma, decodeSplitCap, mmaFromGroup }
  from '../../src/backend/cuda/attention-launch.js';
import { kernelDir, kernelSource } from '../../src/backend/cuda/compile.js';
import {
  DECODE_CHUNK_ROUND, decodeGridZ, decodeGroup, decodeGroupsBuilt, decodeHeadGroups, decodeWide, graphKey, LONG_SPLIT_TOKENS, ODD_GROUP_MIN_ROWS, MAX_SPLITS,
  maxSplitsOf, MMA_GROUP_FILL, MMA_MAX_SPLITS, mmaSplitCap, PRE_BLOCKS_PER_SM, decodeCluster, decodePrefetch, SHORT_GRAPH_KV, SHORT_ROW_KV, SHORT_GRAPH_SPLITS, SHORT_SPLIT_TOKENS, shortGraphRows, SPLIT_TOKENS, splitPlan,
  splitStateRows, WIDE_BLOCKS_PER_SM,
} from '../../src/backend/cuda/decode-splits.js';

const moduleUrl = new URL('../../src/backend/cuda/decode-splits.js', import.meta.url).href;

test('splitPlan tiles [0, kvLen) with at most MAX_SPLITS non-empty splits of whole 16-position rounds', () => {
  for (let kvLen = 1; kvLen <= 40_000; kvLen += kvLen < 3000 ? 1 : 97) {
    const { numSplits, chunk } = splitPlan(kvLen);
    assert.ok(numSplits >= 1 && numSplits <= MAX_SPLITS, `kvLen ${kvLen}: ${numSplits} splits`);
    assert.equal(chunk % 16, 0, `kvLen ${kvLen}: chunk ${chunk}`);
    assert.ok((numSplits - 1) * chunk < kvLen, `kvLen ${kvLen}: last split empty`);
    assert.ok(numSplits * chunk >= kvLen, `kvLen ${kvLen}: splits stop short`);
    const target = kvLen > 2 * SPLIT_TOKENS ? LONG_SPLIT_TOKENS
      : kvLen <= SHORT_ROW_KV ? SHORT_SPLIT_TOKENS : SPLIT_TOKENS;
    assert.ok(numSplits <= Math.ceil(kvLen / target), `kvLen ${kvLen}: more splits than ceil(kvLen / ${target})`);
  }
  // short rows are cut in up to 4 splits (a single short stream gets blocks enough), the next length in one
  assert.equal(splitPlan(SHORT_SPLIT_TOKENS).numSplits, 1);
  assert.equal(splitPlan(SHORT_SPLIT_TOKENS + 1).numSplits, 2);
  assert.equal(splitPlan(300).numSplits, 3);
  assert.equal(splitPlan(SHORT_ROW_KV).numSplits, SHORT_ROW_KV / SHORT_SPLIT_TOKENS);
  assert.equal(splitPlan(SHORT_ROW_KV + 1).numSplits, 1);
  assert.equal(splitPlan(SPLIT_TOKENS).numSplits, 1);
  assert.equal(splitPlan(SPLIT_TOKENS + 1).numSplits, 2);
  // rows longer than two large splits are cut in small ones, so a single long stream fills more blocks
  assert.equal(splitPlan(2 * SPLIT_TOKENS).numSplits, 2);
  assert.equal(splitPlan(2 * SPLIT_TOKENS + 1).numSplits, Math.ceil((2 * SPLIT_TOKENS + 1) / LONG_SPLIT_TOKENS));
  assert.equal(splitPlan(3000).numSplits, 12);
  assert.equal(splitPlan(100_000).numSplits, MAX_SPLITS);
  assert.equal(splitPlan(0).numSplits, 1);
});

test('decodeGridZ spreads batch 1 over the SMs and gives big batches one block per row', () => {
  const h100SMs = 132;
  const long = 16 * SPLIT_TOKENS;
  const mid = 4 * SPLIT_TOKENS;
  assert.equal(decodeGridZ(32, h100SMs, splitPlan(long).numSplits), MAX_SPLITS);
  assert.equal(decodeGridZ(32, h100SMs, splitPlan(mid).numSplits), splitPlan(mid).numSplits);
  assert.ok(32 * decodeGridZ(32, h100SMs, MAX_SPLITS) >= h100SMs);
  assert.equal(decodeGridZ(256 * 32, h100SMs, MAX_SPLITS), 1);
  assert.equal(decodeGridZ(32, h100SMs, 1), 1);
  // rows that fill 8 blocks per SM are walked by one block each (128 tokens x 8 kv heads), half that is split in two
  assert.equal(decodeGridZ(1024, h100SMs, MAX_SPLITS), 1);
  assert.equal(decodeGridZ(768, h100SMs, MAX_SPLITS), 1);
  assert.equal(decodeGridZ(512, h100SMs, MAX_SPLITS), 2);
  assert.equal(decodeGridZ(264, h100SMs, MAX_SPLITS), 4);
});

test('maxSplitsOf takes the longest of the rows it is given (the decode kernel\'s, not every token)', () => {
  const positions = Int32Array.of(0, 4999, 30, 199);
  assert.equal(maxSplitsOf(positions, Int32Array.of(0, 1, 2, 3)), splitPlan(5000).numSplits);
  assert.equal(maxSplitsOf(positions, Int32Array.of(0)), 1);
  assert.equal(maxSplitsOf(positions, Int32Array.of(3, 2)), splitPlan(200).numSplits);
  assert.equal(maxSplitsOf(positions, Int32Array.of(1)), splitPlan(5000).numSplits);
});

test('QUIRE_DECODE_(LONG_|SHORT_)SPLIT_TOKENS set the split sizes; unset, 1024, 256 and 128; short 0 is none', () => {
  const read = (env: Record<string, string>) => execFileSync(process.execPath, ['--input-type=module', '-e',
    `import { SPLIT_TOKENS, LONG_SPLIT_TOKENS, SHORT_SPLIT_TOKENS, splitPlan } from ${JSON.stringify(moduleUrl)}; ` +
    'console.log(SPLIT_TOKENS, LONG_SPLIT_TOKENS, SHORT_SPLIT_TOKENS, splitPlan(300).numSplits);'],
  { env: { ...process.env, QUIRE_DECODE_SPLIT_TOKENS: '', QUIRE_DECODE_LONG_SPLIT_TOKENS: '',
    QUIRE_DECODE_SHORT_SPLIT_TOKENS: '', ...env } }).toString().trim();
  assert.equal(read({ QUIRE_DECODE_SPLIT_TOKENS: '256' }), '256 256 128 3');
  assert.equal(read({ QUIRE_DECODE_LONG_SPLIT_TOKENS: '128' }), '1024 128 128 3');
  assert.equal(read({ QUIRE_DECODE_SHORT_SPLIT_TOKENS: '64' }), '1024 256 64 5', 'rows up to SHORT_ROW_KV in 64s');
  assert.equal(read({ QUIRE_DECODE_SHORT_SPLIT_TOKENS: '0' }), '1024 256 0 1');
  assert.equal(read({}), '1024 256 128 3');
});

test('few rows of many splits keep whole groups once their blocks, splits counted, fill the GPU GROUP_FILL times', () => {
  // qwen3-8b on an H200: 8 rows at 4k of context (16 splits) give 8 x 8 x 16 = 1,024 whole-group blocks
  assert.equal(decodeGroup(8, 32, 8, 132, 128, 8, 16, 4), 4, '1,024 blocks >= 4 x 132');
  assert.equal(decodeGroup(4, 32, 8, 132, 128, 8, 16, 4), 1, '512 blocks < 4 x 132');
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, MAX_SPLITS, 4), 1, 'a single stream: 8 x 16 blocks');
  assert.equal(decodeGroup(8, 32, 8, 132, 128, 8, 16, 0), 1, 'fill 0: the rows alone decide');
  assert.equal(decodeGroup(8, 32, 8, 132, 128, 8, 1, 4), 1, 'short rows of one split');
  assert.equal(decodeGroup(8, 32, 8, 132, 128, 2, 16, 4), 2, 'an FP8 cache\'s builds: G up to 2');
});

test('whole groups on the tensor cores (G >= mmaFrom) keep from MMA_GROUP_FILL blocks a SM, others from GROUP_FILL', () => {
  // qwen3-8b alone at 16k of context: 8 kv heads x 16 splits = 128 whole-group blocks, 0.97 a SM on an H200
  assert.equal(MMA_GROUP_FILL, 0.9);
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 16, 4, 4, 0.9), 4, 'G 4 on tensor cores: 128 >= 0.9 x 132');
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 16, 4, 4, 1), 1, 'at fill 1: 128 < 132');
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 16, 4, Infinity, 0.9), 1, 'CUDA cores (mmaFrom Infinity): fill 4');
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 8, 4, 4, 0.9), 1, 'at 2k (8 splits) 64 blocks: G 1');
  // qwen3-0.6b (G 2) under groups (mmaFrom 4): its whole group is the CUDA-core kernel's, so fill 4 decides
  assert.equal(decodeGroup(2, 16, 8, 132, 128, 8, 16, 4, 4, 0.9), 1, '2 rows x 8 x 16 = 256 blocks < 4 x 132');
  assert.equal(decodeGroup(2, 16, 8, 132, 128, 8, 16, 4, 1, 0.9), 2, 'under all (mmaFrom 1) 256 >= 0.9 x 132');
  // qwen3-30b-a3b at batch 8 and 2k: 8 rows x 4 kv heads x 8 splits = 256 blocks
  assert.equal(decodeGroup(8, 32, 4, 132, 128, 8, 8, 4, 4), 8, 'the default MMA fill');
  assert.equal(decodeGroup(8, 32, 4, 132, 128, 8, 8), 1, 'no MMA: 256 < 4 x 132');
  assert.deepEqual(['off', 'groups', 'all'].map((m) => mmaFromGroup(m as DecodeMma)), [Infinity, DECODE_MMA_MIN_GROUP, 1]);
});

test('the _mma builds\' split cap (MMA_MAX_SPLITS): more splits of long rows, more whole-group blocks', () => {
  assert.equal(MMA_MAX_SPLITS, 32, 'a lone long stream splits its rows up to 32 times (session 44)');
  // the larger cap only where MAX_SPLITS leaves the grid under one block a SM: qwen3-8b alone (8 kv heads), not 8 rows
  assert.deepEqual([8, 9, 64].map((rows) => mmaSplitCap(rows, 132)), [32, MAX_SPLITS, MAX_SPLITS]);
  assert.equal(mmaSplitCap(64, 132, 8), 8);
  // a 32k row: 16 splits of 2,000 at the kernel's cap, 32 of 1,008 at 32; rows up to 4k alike at both
  assert.deepEqual(splitPlan(32000), { numSplits: 16, chunk: 2000 });
  assert.deepEqual(splitPlan(32000, 32), { numSplits: 32, chunk: 1008 });
  for (const kv of [1, 512, 2048, 4096]) assert.deepEqual(splitPlan(kv, 32), splitPlan(kv), `kv ${kv}`);
  const rows = Int32Array.from([0, 1]);
  assert.deepEqual([16, 32, 64].map((cap) => maxSplitsOf(Int32Array.from([15999, 100]), rows, cap)), [16, 32, 63]);
  assert.equal(decodeGridZ(8, 132, 64, 32), 32, 'z up to the launch\'s cap');
  assert.equal(decodeGridZ(8, 132, 64), MAX_SPLITS);
  // qwen3-8b alone at 16k, whole groups at fill 1: 8 x 16 = 128 blocks < 132 at cap 16, 8 x 32 = 256 at 32
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 64, 4, 4, 1, 16), 1);
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 64, 4, 4, 1, 32), 4);
  assert.equal(decodeGroup(1, 32, 8, 132, 128, 8, 64, 1, Infinity, 1, 32), 1, 'CUDA cores: MAX_SPLITS counts');
  // 9 kv heads' blocks at 16 splits fill 132 SMs past one a SM: the larger cap does not count there
  assert.equal(decodeGroup(1, 36, 9, 132, 128, 8, 64, 4, 4, 2, 32), 1, '9 x 16 = 144 < 2 x 132');
});

test('QUIRE_DECODE_FOLD_BATCH (8 unset) and QUIRE_MOE_COMBINE_BATCH (1 unset) reach their kernels\' builds', () => {
  const compileUrl = new URL('../../src/backend/cuda/compile.js', import.meta.url).href;
  const read = (knob: string, value: string, file: string, define: string) => execFileSync(process.execPath,
    ['--input-type=module', '-e', `import { kernelSource } from ${JSON.stringify(compileUrl)}; ` +
      `console.log(/^#define ${define} (\\d+)$/m.exec(kernelSource(${JSON.stringify(file)}))?.[1]);`],
    { env: { ...process.env, [knob]: value } }).toString().trim();
  assert.equal(read('QUIRE_DECODE_FOLD_BATCH', '1', 'attention_decode.cu', 'DECODE_FOLD_BATCH'), '1');
  assert.equal(read('QUIRE_DECODE_FOLD_BATCH', '', 'attention_decode.cu', 'DECODE_FOLD_BATCH'), '8');
  assert.equal(read('QUIRE_MOE_COMBINE_BATCH', '4', 'moe.cu', 'MOE_COMBINE_BATCH'), '4');
  assert.equal(read('QUIRE_MOE_COMBINE_BATCH', '', 'moe.cu', 'MOE_COMBINE_BATCH'), '1');
});

test('head groups (QUIRE_DECODE_HEAD_GROUPS=4): one-head blocks side by side only where their loads can meet', () => {
  assert.equal(decodeHeadGroups(1, 128, 'bf16', 32, 8, false, false, 4), 4, 'qwen3-8b, one head a block');
  assert.equal(decodeHeadGroups(1, 64, 'bf16', 32, 8, false, false, 4), 4, 'D 64');
  assert.equal(decodeHeadGroups(1, 128, 'bf16', 32, 8, false, false, 1), 1, 'the knob at 1: none');
  assert.equal(decodeHeadGroups(4, 128, 'bf16', 32, 8, false, false, 4), 1, 'whole-group blocks already share');
  assert.equal(decodeHeadGroups(1, 128, 'bf16', 32, 8, true, false, 4), 1, 'the _pre builds (small grids)');
  assert.equal(decodeHeadGroups(1, 128, 'bf16', 32, 8, false, true, 4), 1, 'the _w builds');
  assert.equal(decodeHeadGroups(1, 128, 'bf16_fp8', 32, 8, false, false, 4), 1, 'an FP8 cache');
  assert.equal(decodeHeadGroups(1, 256, 'bf16', 32, 8, false, false, 4), 1, 'D 256 (no build)');
  assert.equal(decodeHeadGroups(1, 128, 'bf16', 16, 8, false, false, 4), 1, 'qwen3-0.6b: 2 query heads a kv head');
  const src = readFileSync(join(kernelDir(), 'attention_decode.cu'), 'utf8');
  const built = [...src.matchAll(/^INSTANTIATE_DGMVPH\(bf16, bf16_t, bf16_t, 8, (\d+), 1, 1, _hg4, false, 4\)$/gm)].map((m) => Number(m[1]));
  assert.deepEqual(built, [64, 128], 'an _hg4 build for each D it takes');
});

test('query heads per block: the whole kv group, or one when the rows leave SMs idle', () => {
  // qwen3-8b: 32 query heads on 8 kv heads (groups of 4); qwen3-0.6b: 16 on 8 (groups of 2)
  assert.equal(decodeGroup(1, 32, 8, 132), 1, 'one row: 32 blocks instead of 8');
  assert.equal(decodeGroup(16, 32, 8, 132), 1, '16 rows x 8 groups = 128 blocks < 132 SMs');
  assert.equal(decodeGroup(17, 32, 8, 132), 4, '136 blocks fill the GPU');
  assert.equal(decodeGroup(256, 16, 8, 132), 2);
  assert.equal(decodeGroup(1, 16, 16, 132), 1, 'no GQA');
  assert.equal(decodeGroup(1, 64, 8, 132), 1);
  assert.equal(decodeGroup(100, 64, 8, 132), 8);
  // Qwen2.5's odd groups take their own builds at D 128 (7B: 28 / 4, 1.5B: 12 / 2, 14B: 40 / 8), 7 at D 64 (0.5B)
  // from ODD_GROUP_MIN_ROWS rows; below, the even builds as before
  const many = ODD_GROUP_MIN_ROWS;
  assert.equal(decodeGroup(many, 28, 4, 132), 7);
  assert.equal(decodeGroup(many, 12, 2, 132), 6);
  assert.equal(decodeGroup(many, 40, 8, 132), 5);
  assert.equal(decodeGroup(many, 14, 2, 132, 64), 7);
  assert.equal(decodeGroup(many, 40, 8, 132, 256), 1, 'no G 5 build at D 256');
  assert.equal(decodeGroup(many - 1, 28, 4, 132), 1, 'fewer rows: one head a block');
  assert.equal(decodeGroup(many - 1, 12, 2, 132), 2, 'fewer rows: the even build');
  assert.deepEqual(decodeGroupsBuilt(128, '8,4,2'), [8, 4, 2, 1], 'QUIRE_DECODE_GROUPS limits the builds');
  assert.equal(decodeGroup(2, 28, 4, 132), 1, 'few rows: one head a block');
});

test('grids over 8 blocks per SM at G <= 2 take the _w (6 a SM) kernels; QUIRE_DECODE_WIDE_BLOCKS moves it', () => {
  const h100SMs = 132;
  assert.equal(WIDE_BLOCKS_PER_SM, 8);
  // qwen3-0.6b (16 query heads, G 2: 8 blocks a row): 128 rows fill two waves at 4 a SM, 136 need a third
  assert.equal(decodeWide(128 * 8, 2, h100SMs), false);
  assert.equal(decodeWide(136 * 8, 2, h100SMs), true);
  assert.equal(decodeWide(256 * 16, 1, h100SMs), true);
  assert.equal(decodeWide(256 * 8, 4, h100SMs), false, 'G 4 needs 128 registers: 4 blocks per SM');
  // the GPU decode-invariance test's batches (4 query heads, 2 kv heads)
  assert.equal(decodeWide(600 * 2, decodeGroup(600, 4, 2, h100SMs), h100SMs), true, '600 rows');
  assert.equal(decodeWide(300 * 2, decodeGroup(300, 4, 2, h100SMs), h100SMs), false, '300 rows');
  const read = (value: string) => execFileSync(process.execPath, ['--input-type=module', '-e',
    `import { decodeWide } from ${JSON.stringify(moduleUrl)}; ` +
    'console.log(decodeWide(8, 2, 132), decodeWide(4096, 2, 132));'],
  { env: { ...process.env, QUIRE_DECODE_WIDE_BLOCKS: value } }).toString().trim();
  assert.equal(read('0'), 'true true');
  assert.equal(read('100000'), 'false false');
  assert.equal(read(''), 'false true');
});

test('every G the host may pick has a build in attention_decode.cu, for a bf16 and for an FP8 cache', () => {
  const src = readFileSync(join(kernelDir(), 'attention_decode.cu'), 'utf8');
  const everyD = [...src.matchAll(/^  INSTANTIATE_DG\(suffix, T, C, V, D, (\d+)\)/gm)].map((m) => Number(m[1]));
  assert.deepEqual(everyD, [1, 2, 4, 8]);
  const own = new Set([...src.matchAll(/^  INSTANTIATE_DG\(suffix, bf16_t, C, V, (\d+), (\d+)\)/gm)].map((m) => `${m[1]}/${m[2]}`));
  for (const D of [64, 128, 256]) {
    for (const G of decodeGroupsBuilt(D, '')) assert.ok(everyD.includes(G) || own.has(`${D}/${G}`), `D ${D} G ${G}`);
  }
  // INSTANTIATE_BF16 builds them all for a bf16 cache; an FP8 cache has only its 16-byte builds (G 1 and 2)
  assert.match(src, /^INSTANTIATE_BF16\(bf16, bf16_t, 8\)$/m);
  assert.doesNotMatch(src, /^INSTANTIATE_BF16\(bf16_fp8/m);
  // an FP8 cache with GQA groups of 1 or 2 takes the 16-byte builds of G 1 and 2 (attention-launch.ts)
  for (const G of [1, 2]) assert.match(src, new RegExp(`INSTANTIATE_DG\\(bf16_fp8x16, bf16_t, fp8_t, 16, D, ${G}\\)`));
  for (const D of [64, 128, 256]) assert.match(src, new RegExp(`^INSTANTIATE_FP8X16\\(${D}\\)$`, 'm'));
});

test('every G the host may pick at D 64 and 128 has a tensor-core build (_mma, QUIRE_DECODE_MMA)', () => {
  const src = readFileSync(join(kernelDir(), 'attention_decode.cu'), 'utf8');
  const mma = new Set([...src.matchAll(/^INSTANTIATE_MMA\((\d+), (\d+)\)$/gm)].map((m) => `${m[1]}/${m[2]}`));
  for (const D of DECODE_MMA_HEAD_DIMS) {
    for (const G of decodeGroupsBuilt(D, '')) assert.ok(mma.has(`${D}/${G}`), `D ${D} G ${G}`);
  }
  assert.equal(mma.size, DECODE_MMA_HEAD_DIMS.map((D) => decodeGroupsBuilt(D, '').length).reduce((a, b) => a + b));
});

test('an FP8 cache caps G at 2 (its 16-byte builds): a group of 4 or 8 gets 2 where the rows fill the GPU', () => {
  assert.equal(decodeGroup(256, 32, 8, 132, 128), 4);
  assert.equal(decodeGroup(256, 32, 8, 132, 128, 2), 2);
  assert.equal(decodeGroup(256, 64, 8, 132, 128, 2), 2);
  assert.equal(decodeGroup(2, 32, 8, 132, 128, 2), 1, 'few rows: a head a block, as without the cap');
  assert.equal(decodeGroup(256, 28, 4, 132, 128, 2), 1, 'group 7: no even divisor up to 2 but 1');
});

test('decode graphs by kv class: rows of up to 2 SPLIT_TOKENS positions never take more than SHORT_GRAPH_SPLITS', () => {
  assert.equal(SHORT_GRAPH_KV, 2048);
  assert.equal(SHORT_GRAPH_SPLITS, 4, 'short rows: 128-position splits up to 512');
  for (let kv = 1; kv <= SHORT_GRAPH_KV; kv++) assert.ok(splitPlan(kv).numSplits <= SHORT_GRAPH_SPLITS, `kv ${kv}`);
  assert.ok(splitPlan(SHORT_GRAPH_KV + 1).numSplits > SHORT_GRAPH_SPLITS, 'one longer row needs the full grid');
  assert.equal(shortGraphRows(Int32Array.of(0, 127, 2047)), true, 'positions up to 2,047: kv up to 2,048');
  assert.equal(shortGraphRows(Int32Array.of(5, 2048)), false);
  assert.equal(shortGraphRows(Int32Array.of(5), false), false, 'QUIRE_GRAPH_KV_CLASSES=0: one class');
  // a graph z of the class's splits, as eager steps of such rows take
  assert.equal(decodeGridZ(16, 132, SHORT_GRAPH_SPLITS), 4);
  assert.equal(decodeGridZ(16, 132, MAX_SPLITS), 16);
  const keys = new Set<number>();
  for (const bucket of [-256, -8, -1, 1, 2, 8, 256]) for (const short of [false, true]) keys.add(graphKey(bucket, short));
  assert.equal(keys.size, 14, 'every (bucket, class) its own graph');
});

test('the kernel\'s short-row bound is SHORT_ROW_KV (split_plan mirrors splitPlan)', () => {
  const src = kernelSource('attention_decode.cu', {});
  assert.equal(Number(/^#define DECODE_SHORT_ROW_KV (\d+)$/m.exec(src)?.[1]), SHORT_ROW_KV);
  assert.equal(Number(/^#define DECODE_CHUNK_ROUND (\d+)$/m.exec(src)?.[1]), DECODE_CHUNK_ROUND);
  assert.equal(SHORT_ROW_KV % DECODE_CHUNK_ROUND, 0);
});

test('the _pre builds: one query head a block, a bf16 cache, D 64 or 128, a grid of at most PRE_BLOCKS_PER_SM a SM', () => {
  assert.equal(decodePrefetch(16 * 4, 1, 128, 'bf16', 132, true), true, 'a single stream of qwen3-0.6b');
  assert.equal(decodePrefetch(16 * 4 * 4, 1, 128, 'bf16', 132, true), true, 'qwen3-0.6b batch 4 (grid z 4)');
  assert.equal(decodePrefetch(16 * 8 * 4, 1, 128, 'bf16', 132, true), false, 'batch 8: 512 blocks, where it lost');
  assert.equal(decodePrefetch(PRE_BLOCKS_PER_SM * 132, 1, 128, 'bf16', 132, true), true);
  assert.equal(decodePrefetch(PRE_BLOCKS_PER_SM * 132 + 1, 1, 128, 'bf16', 132, true), false, 'a larger grid');
  assert.equal(decodePrefetch(64, 1, 64, 'bf16', 132, true), true);
  assert.equal(decodePrefetch(64, 2, 128, 'bf16', 132, true), false, 'G 2');
  assert.equal(decodePrefetch(64, 1, 256, 'bf16', 132, true), false, 'D 256');
  assert.equal(decodePrefetch(64, 1, 128, 'bf16_fp8', 132, true), false, 'an FP8 cache');
  assert.equal(decodePrefetch(64, 1, 128, 'bf16', 132, false), false, 'QUIRE_DECODE_PREFETCH=0');
  const src = readFileSync(join(kernelDir(), 'attention_decode.cu'), 'utf8');
  const pre = [...src.matchAll(/^INSTANTIATE_DGMVP\(bf16, bf16_t, bf16_t, 8, (\d+), 1, DECODE_PRE_MINB, _pre, true\)$/gm)]
    .map((m) => Number(m[1]));
  assert.deepEqual(pre, [64, 128], 'a _pre build for each D it takes');
  const minBlocks = Number(/^#define DECODE_PRE_MINB (\d+)$/m.exec(src)?.[1]);
  assert.ok(minBlocks >= PRE_BLOCKS_PER_SM, `their launch bounds (${minBlocks} a SM) hold the grids they take`);
});

test('a _pre launch of grid z 2 to 8 runs in clusters of its z (a row\'s splits folded from the blocks\' shared memory)', () => {
  assert.equal(decodeCluster(true, 4, true), 4);
  assert.equal(decodeCluster(true, 8, true), 8);
  assert.equal(decodeCluster(true, 1, true), 1, 'one block a row: nothing to fold');
  assert.equal(decodeCluster(true, 16, true), 1, 'beyond the portable cluster size');
  assert.equal(decodeCluster(false, 4, true), 1, 'not a _pre build');
  assert.equal(decodeCluster(true, 4, false), 1, 'QUIRE_DECODE_CLUSTER=0');
});

test('the split-state buffers hold every launch\'s rows x cap, at the size of MAX_SPLITS a row for a full batch',
  () => {
  // a launch of `rows` decode rows writes [rows, heads, cap] states (its grid slots are its decode rows)
  for (const numSMs of [132, 114, 78, 16]) {
    for (const [H, KV] of [[32, 8], [32, 4], [16, 8], [64, 8], [14, 2]] as const) {
      for (const capRows of [1, 3, 9, 64, 256]) {
        const room = splitStateRows(capRows, numSMs, 32);
        for (let rows = 1; rows <= capRows; rows++) {
          for (const G of new Set([1, 2, H / KV])) {
            for (const mma of ['groups', 'all'] as const) {
              const cap = decodeSplitCap(G, mma, rows * (H / G), numSMs, 32);
              assert.ok(rows * cap <= room,
                `${numSMs} SMs, ${H}/${KV} heads, G ${G}, ${rows} of ${capRows} rows: ${rows} x ${cap} > ${room}`);
            }
          }
        }
      }
    }
  }
  assert.equal(splitStateRows(256, 132, 32), 256 * MAX_SPLITS, 'a full batch: MAX_SPLITS a row, not 32');
  assert.equal(splitStateRows(256, 132, null), 256 * MAX_SPLITS);
  assert.equal(splitStateRows(4, 132, 32), 4 * 32, 'few rows: the larger cap');
});
