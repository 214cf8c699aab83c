// ncu-map: an Nsight Compute CSV (ncu's own form: its log lines, a quoted header, a line per kernel and metric, numbers
// with thousands commas) read into kernels, a step found by its sampling kernel, and the step's kernels grouped.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatStepMap, parseNcuCsv, stepMap, stepRange } from '../../src/lab/ncu-map.js';

const HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
  + '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"';

/** ncu's lines for kernel `id`: its time (ns) and DRAM bytes read, the numbers written as ncu writes them. */
function lines(id: number, name: string, grid: string, ns: number, bytes: number): string[] {
  const head = `"${id}","2544","node","127.0.0.1","${name}","1","13","(256, 1, 1)","${grid}","0","9.0","Command line profiler metrics"`;
  return [`${head},"dram__bytes_read.sum","byte","${bytes.toLocaleString('en-US')}"`,
    `${head},"gpu__time_duration.sum","ns","${ns.toLocaleString('en-US')}"`];
}

const CSV = ['==PROF== Connected to process 2544 (/tmp/gpu-host-bin/node)', '==ERROR== The application returned an error code (1).',
  HEADER,
  ...lines(0, 'embedding_bf16', '(1024, 1, 1)', 9_504, 16_896),          // step 0: a prompt
  ...lines(1, 'gemm_chain_s2', '(384, 1, 1)', 16_800, 50_370_000),
  ...lines(2, 'sample_tokens_bf16', '(1, 1, 1)', 15_200, 370_000),
  ...lines(3, 'embedding_bf16', '(1, 1, 1)', 8_600, 10_000),             // step 1: a decode step
  ...lines(4, 'gemm_chain_s2', '(384, 1, 1)', 16_000, 50_000_000),
  ...lines(5, 'gemm_chain_s2', '(384, 1, 1)', 18_000, 50_000_000),
  ...lines(6, 'gemm_chain_p8', '(9496, 1, 1)', 321_700, 1_244_720_000),
  ...lines(7, 'sample_tokens_bf16', '(1, 1, 1)', 15_000, 370_000),
  ''].join('\n');

test('parseNcuCsv: a kernel per id in launch order, its metrics as numbers, ncu\'s log lines skipped', () => {
  const k = parseNcuCsv(CSV);
  assert.deepEqual(k.map((x) => x.id), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(k[6], { id: 6, name: 'gemm_chain_p8', grid: '(9496, 1, 1)', block: '(256, 1, 1)',
    metrics: { 'dram__bytes_read.sum': 1_244_720_000, 'gpu__time_duration.sum': 321_700 } });
  assert.throws(() => parseNcuCsv('"ID","Kernel Name"\n"0","x"'), /no "Grid Size" column/);
});

test('stepRange: the nth step ends at its sampling kernel; none past the last', () => {
  const k = parseNcuCsv(CSV);
  assert.deepEqual(stepRange(k, 0), [0, 3]);
  assert.deepEqual(stepRange(k, 1), [3, 8]);
  assert.equal(stepRange(k, 2), null);
});

test('stepMap: kernels grouped by name, grid and block, the largest total first; the table names each group once', () => {
  const k = parseNcuCsv(CSV);
  const m = stepMap(k.slice(3, 8));
  assert.equal(m.numKernels, 5);
  assert.deepEqual(m.rows.map((r) => [r.name, r.launches]), [['gemm_chain_p8', 1], ['gemm_chain_s2', 2],
    ['sample_tokens_bf16', 1], ['embedding_bf16', 1]]);
  assert.equal(m.rows[1]!.us, 34);
  assert.equal(m.rows[1]!.readBytes, 100_000_000);
  assert.ok(Math.abs(m.us - 379.3) < 1e-9);
  const table = formatStepMap(m, 4.27e12);
  // gemm_chain_s2: 17.0 us each, 50.00 MB each, 2,941 GB/s
  assert.match(table, /\| gemm_chain_s2 \| \(384, 1, 1\) x \(256, 1, 1\) \| 2 \| 17\.0 \| 50\.00 \| 2941 \| 9\.0% \|/);
  assert.match(table, /^5 kernels, 379\.3 us alone; 1345\.1 MB read from DRAM, 315\.0 us at 4\.27 TB\/s \(83%\)/);
});
