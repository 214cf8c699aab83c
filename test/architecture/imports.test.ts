// Arrows point down only: every import in src/ (type-only, re-exports and dynamic imports included) goes from a
// folder to one its row of the layer table in docs/architecture.md allows. The table is read from the doc, so the
// doc and the code cannot disagree. Also: nothing outside src/knobs reads a QUIRE_* variable from process.env.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';

/** folder -> the folders it may import, from docs/architecture.md's table ("| `api/` | ... | `engine`, `loader` |"). */
export function layerTable(markdown: string): Map<string, Set<string>> {
  const table = new Map<string, Set<string>>();
  const start = markdown.indexOf('<!-- layers -->');
  const end = markdown.indexOf('<!-- /layers -->');
  assert.ok(start >= 0 && end > start, 'docs/architecture.md has the layer table between <!-- layers --> markers');
  for (const line of markdown.slice(start, end).split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const folder = /^`([a-z]+)\/`$/.exec(cells[1] ?? '')?.[1];
    if (!folder) continue;
    table.set(folder, new Set([...(cells[3] ?? '').matchAll(/`([a-z]+)\/?`/g)].map((m) => m[1]!)));
  }
  return table;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? sourceFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** Relative specifiers a file imports (static, type-only, export-from, dynamic). */
export function importsOf(source: string): string[] {
  const specs = [...source.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;'"]*?from\s*'(\.[^']+)'/g),
    ...source.matchAll(/(?:^|\n)\s*import\s*'(\.[^']+)'/g), ...source.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)];
  return specs.map((m) => m[1]!);
}

/** The layer folder of a path under src/ ('' for files at src/'s top, which any layer may use and which use none). */
function layerOf(path: string): string {
  const parts = relative('src', path).split('/');
  return parts.length > 1 ? parts[0]! : '';
}

/** Files at src/'s top that sit above every layer (docs/architecture.md): the package's entry points. */
const TOP_ENTRIES = new Set(['src/index.ts', 'src/serve.ts']);

/** Every import that crosses layers against the table: "from -> to (file: specifier)". */
export function upwardImports(files: { path: string; source: string }[], table: Map<string, Set<string>>): string[] {
  const bad: string[] = [];
  for (const { path, source } of files) {
    const from = layerOf(path);
    if (TOP_ENTRIES.has(path)) continue;
    for (const spec of importsOf(source)) {
      const to = layerOf(normalize(join(dirname(path), spec)));
      if (to === from || to === '') continue;
      if (from === '' || !table.get(from)?.has(to)) bad.push(`${from || 'src'} -> ${to} (${path}: '${spec}')`);
    }
  }
  return bad;
}

const table = layerTable(readFileSync('docs/architecture.md', 'utf8'));
const files = sourceFiles('src').map((path) => ({ path, source: readFileSync(path, 'utf8') }));

test('every folder of src/ has a row in the layer table', () => {
  const folders = new Set(files.map((f) => layerOf(f.path)).filter((l) => l !== ''));
  assert.deepEqual([...folders].filter((f) => !table.has(f)), []);
});

test('imports point down only (the layer table in docs/architecture.md)', () => {
  assert.deepEqual(upwardImports(files, table), []);
});

test('an upward import is caught: static, type-only, re-export and dynamic', () => {
  const t = new Map([['model', new Set(['backend'])], ['backend', new Set<string>()]]);
  const planted = [
    { path: 'src/backend/x.ts', source: "import type { Model } from '../model/model.js';\n" },
    { path: 'src/backend/cuda/y.ts', source: "export { W } from '../../model/weights.js';\n" },
    { path: 'src/backend/z.ts', source: "const m = await import('../model/model.js');\n" },
    { path: 'src/model/ok.ts', source: "import { Backend } from '../backend/backend.js';\nimport './local.js';\n" },
  ];
  assert.deepEqual(upwardImports(planted, t), [
    "backend -> model (src/backend/x.ts: '../model/model.js')",
    "backend -> model (src/backend/cuda/y.ts: '../../model/weights.js')",
    "backend -> model (src/backend/z.ts: '../model/model.js')",
  ]);
});

test('only src/knobs reads QUIRE_* variables from the environment', () => {
  const readers = files.filter((f) => !f.path.startsWith('src/knobs/') && /env(?:\.|\[')QUIRE_/.test(f.source));
  assert.deepEqual(readers.map((f) => f.path), []);
});
