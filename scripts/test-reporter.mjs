// A node:test reporter for `npm test`: quiet while tests pass. It prints
//   - each failure as TAP (node's own tap reporter, fed only the failures),
//     then the last lines its test file wrote to stderr and stdout;
//   - each skipped test with its reason;
//   - always one closing line: "tests: N passed, N failed, N skipped, N todo, N cancelled (S s)".
import { relative } from 'node:path';
import { tap } from 'node:test/reporters';

const TAIL_LINES = 40;

/** The summary line from node's closing diagnostics ("pass 12", "fail 0", ...). */
export function summaryLine(counts, durationMs) {
  const n = (k) => counts[k] ?? 0;
  return `tests: ${n('pass')} passed, ${n('fail')} failed, ${n('skipped')} skipped, ${n('todo')} todo, `
    + `${n('cancelled')} cancelled (${(durationMs / 1000).toFixed(1)} s)`;
}

export default async function* quietReporter(source) {
  const failures = [];
  const output = new Map();  // file -> its last lines of stdout and stderr
  const failedFiles = new Set();
  const counts = {};
  let durationMs = 0;
  for await (const event of source) {
    const d = event.data ?? {};
    switch (event.type) {
      case 'test:fail':
        failures.push(event);
        if (d.file) failedFiles.add(d.file);
        break;
      case 'test:pass':
        if (d.skip !== undefined && d.skip !== false) {
          yield `skip: ${d.name}${typeof d.skip === 'string' ? ` (${d.skip})` : ''}${d.file ? ` [${relative(process.cwd(), d.file)}]` : ''}\n`;
        }
        break;
      case 'test:stdout':
      case 'test:stderr': {
        if (!d.file) break;
        const lines = output.get(d.file) ?? [];
        lines.push(...String(d.message).split('\n').filter((l) => l.length > 0));
        output.set(d.file, lines.slice(-TAIL_LINES));
        break;
      }
      case 'test:diagnostic': {
        // node's closing diagnostics come at nesting 0: "tests 12", "pass 11", "duration_ms 1234.5"
        const m = /^(tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) ([\d.]+)$/.exec(String(d.message));
        if (m && d.nesting === 0) {
          if (m[1] === 'duration_ms') durationMs = Number(m[2]);
          else counts[m[1]] = Number(m[2]);
        }
        break;
      }
      default:
        break;
    }
  }
  if (failures.length > 0) {
    yield* tap((async function* () { yield* failures; })());
    for (const file of failedFiles) {
      const lines = output.get(file);
      if (lines?.length) yield `# output of ${relative(process.cwd(), file)} (last ${lines.length} lines):\n${lines.map((l) => `#   ${l}`).join('\n')}\n`;
    }
  }
  yield `${summaryLine(counts, durationMs)}\n`;
}
