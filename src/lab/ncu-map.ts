// A per-kernel map of one engine step from an Nsight Compute CSV (`ncu --csv --log-file F --metrics
// gpu__time_duration.sum,dram__bytes_read.sum[,dram__bytes_write.sum] quire bench decode ...`): the step's kernels
// grouped by name, grid and block, each group's launches, time, DRAM bytes and read rate, largest first, and the
// step's total against its bytes at a given bandwidth. Sessions 38-45 made these maps by hand (docs/perf-log.md).
//
// Each kernel ran alone with the L2 flushed, so the total is above a graphed step's time: the shares say where to
// work, not what a step takes. The step is found by its sampling kernel (sample_tokens: the last of a step), the Nth
// such step of the file unless a kernel range is given. The CSV is ncu's own regular form (every field quoted, ids in
// order, numbers with thousands commas), read line by line: no CSV library for one fixed shape.

import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';

export interface NcuKernel {
  id: number;
  name: string;
  grid: string;
  block: string;
  /** Metric name -> value (ns, bytes). */
  metrics: Record<string, number>;
}

/** The fields of one ncu CSV line (`"a","b,c",...`): quoted fields, no quotes inside a field. */
function fields(line: string): string[] {
  const t = line.trim();
  if (!t.startsWith('"') || !t.endsWith('"')) return [];
  return t.slice(1, -1).split('","');
}

/** The kernels of an ncu CSV, in launch order (ncu's log lines and warnings skipped). */
export function parseNcuCsv(text: string): NcuKernel[] {
  const lines = text.split('\n').filter((l) => l.startsWith('"'));
  const header = fields(lines[0] ?? '');
  const col = (name: string) => {
    const i = header.indexOf(name);
    if (i < 0) throw new Error(`ncu CSV: no "${name}" column (is it ncu --csv output with --metrics?)`);
    return i;
  };
  const [id, name, grid, block, metric, value] = ['ID', 'Kernel Name', 'Grid Size', 'Block Size', 'Metric Name',
    'Metric Value'].map(col) as [number, number, number, number, number, number];
  const byId = new Map<number, NcuKernel>();
  for (const line of lines.slice(1)) {
    const f = fields(line);
    if (f.length !== header.length) continue;
    const k = Number(f[id]);
    let kernel = byId.get(k);
    if (!kernel) byId.set(k, kernel = { id: k, name: f[name]!, grid: f[grid]!, block: f[block]!, metrics: {} });
    kernel.metrics[f[metric]!] = Number(f[value]!.replace(/,/g, ''));
  }
  return [...byId.values()].sort((a, b) => a.id - b.id);
}

/** [from, to) of the `n`th step (0-based) that ends in a kernel whose name starts with `last`; null past the last. */
export function stepRange(kernels: readonly NcuKernel[], n: number, last = 'sample_tokens'): [number, number] | null {
  const ends = kernels.flatMap((k, i) => (k.name.startsWith(last) ? [i] : []));
  if (n < 0 || n >= ends.length) return null;
  return [n === 0 ? 0 : ends[n - 1]! + 1, ends[n]! + 1];
}

export interface MapRow {
  name: string;
  grid: string;
  block: string;
  launches: number;
  us: number;
  readBytes: number;
}

export interface StepMap {
  rows: MapRow[];
  numKernels: number;
  us: number;
  readBytes: number;
}

/** The kernels grouped by name, grid and block, the largest total time first. */
export function stepMap(kernels: readonly NcuKernel[]): StepMap {
  const groups = new Map<string, MapRow>();
  for (const k of kernels) {
    const key = `${k.name}\u0000${k.grid}\u0000${k.block}`;
    let g = groups.get(key);
    if (!g) groups.set(key, g = { name: k.name, grid: k.grid, block: k.block, launches: 0, us: 0, readBytes: 0 });
    g.launches++;
    g.us += (k.metrics['gpu__time_duration.sum'] ?? 0) / 1000;
    g.readBytes += k.metrics['dram__bytes_read.sum'] ?? 0;
  }
  const rows = [...groups.values()].sort((a, b) => b.us - a.us);
  return { rows, numKernels: kernels.length, us: rows.reduce((a, r) => a + r.us, 0),
    readBytes: rows.reduce((a, r) => a + r.readBytes, 0) };
}

/** The map as a markdown table, with the step's bytes at `bandwidth` (bytes/s) as its ideal. */
export function formatStepMap(m: StepMap, bandwidth: number): string {
  const ideal = (m.readBytes / bandwidth) * 1e6;
  const tbs = (bandwidth / 1e12).toFixed(2);
  const out = [`${m.numKernels} kernels, ${m.us.toFixed(1)} us alone; `
    + `${(m.readBytes / 1e6).toFixed(1)} MB read from DRAM, ${ideal.toFixed(1)} us at ${tbs} TB/s `
    + `(${((ideal / m.us) * 100).toFixed(0)}%)`, '',
  '| kernel | grid x block | launches | us each | MB each | GB/s | share |', '|---|---|---|---|---|---|---|'];
  for (const r of m.rows) {
    const gbs = r.readBytes / (r.us * 1e3);
    out.push(`| ${r.name.slice(0, 60)} | ${r.grid} x ${r.block} | ${r.launches} | ${(r.us / r.launches).toFixed(1)} | `
      + `${(r.readBytes / r.launches / 1e6).toFixed(2)} | ${gbs >= 1 ? gbs.toFixed(0) : ''} | `
      + `${((r.us / m.us) * 100).toFixed(1)}% |`);
  }
  return out.join('\n');
}

function main(argv: string[]): void {
  const o = new Command('quire-ncu-map')
    .description('a per-kernel map of one step from an Nsight Compute CSV (ncu --csv --log-file)')
    .argument('<csv>', 'ncu --csv output with gpu__time_duration.sum and dram__bytes_read.sum')
    .option('--step <n>', 'the step: the nth (0-based) that ends in a sample_tokens kernel', '1')
    .option('--range <from,to>', 'kernels [from, to) instead of --step')
    .option('--bandwidth <TB/s>', 'the copy bandwidth the ideal is taken at', '4.27')
    .parse(argv);
  const opts = o.opts<{ step: string; range?: string; bandwidth: string }>();
  const file = o.args[0]!;
  let kernels: NcuKernel[];
  try {
    kernels = parseNcuCsv(readFileSync(file, 'utf8'));
  } catch (e) {
    console.error(`${file}: ${(e as Error).message}`);
    process.exitCode = 2;
    return;
  }
  const range = opts.range ? opts.range.split(',').map(Number) as [number, number]
    : stepRange(kernels, Number(opts.step));
  if (!range || range.some((x) => !Number.isInteger(x)) || range[0] >= range[1]) {
    console.error(`${file}: ${kernels.length} kernels; no step ${opts.range ?? opts.step} in them`);
    process.exitCode = 2;
    return;
  }
  console.log(`kernels ${range[0]} to ${range[1] - 1} of ${kernels.length}`);
  console.log(formatStepMap(stepMap(kernels.slice(range[0], range[1])), Number(opts.bandwidth) * 1e12));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main(process.argv);
