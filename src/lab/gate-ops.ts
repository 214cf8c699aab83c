// Op gate: the GPU op tests' node test runner output as passed / total.

import type { GateCheck } from './gate.js';

export interface OpTestSummary {
  numTests: number;
  numPassed: number;
  numFailed: number;
  numSkipped: number;
  failedNames: string[];
}

/**
 * Reads TAP (`ok 1 - name`, `# pass 3`) or spec reporter output (`✔ name`,
 * `✖ name`, `ℹ pass 3`). The runner's own totals win when present.
 */
export function parseTestRunnerOutput(text: string): OpTestSummary {
  const totals: Record<string, number> = {};
  const failed = new Set<string>();
  let numOk = 0;
  let numNotOk = 0;
  let numSkip = 0;
  let inFailingSection = false;
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\x1b\[[0-9;]*m/g, '');
    const total = /^\s*(?:#|ℹ)\s+(tests|pass|fail|skipped|todo|cancelled)\s+(\d+)\s*$/.exec(line);
    if (total) {
      totals[total[1]!] = Number(total[2]);
      continue;
    }
    if (/^\s*✖ failing tests:/.test(line)) inFailingSection = true;
    const tap = /^\s*(not ok|ok)\s+\d+\s*(?:-\s*)?(.*?)(\s+#\s*(SKIP|TODO)\b.*)?$/i.exec(line);
    if (tap) {
      if (tap[4]) numSkip++;
      else if (tap[1] === 'ok') numOk++;
      else {
        numNotOk++;
        failed.add(tap[2]!.trim());
      }
      continue;
    }
    const spec = /^\s*(✔|✖|﹣)\s+(.*?)(?:\s+\([\d.]+m?s\))?(\s+#\s*SKIP.*)?$/.exec(line);
    if (spec && !inFailingSection) {
      if (spec[1] === '﹣' || spec[3]) numSkip++;
      else if (spec[1] === '✔') numOk++;
      else {
        numNotOk++;
        failed.add(spec[2]!.trim());
      }
    }
  }
  if (totals['tests'] !== undefined) {
    return {
      numTests: totals['tests'],
      numPassed: totals['pass'] ?? 0,
      numFailed: (totals['fail'] ?? 0) + (totals['cancelled'] ?? 0),
      numSkipped: (totals['skipped'] ?? 0) + (totals['todo'] ?? 0),
      failedNames: [...failed],
    };
  }
  return { numTests: numOk + numNotOk + numSkip, numPassed: numOk, numFailed: numNotOk, numSkipped: numSkip, failedNames: [...failed] };
}

export function opsCheck(name: string, s: OpTestSummary): GateCheck {
  const passed = s.numFailed === 0 && s.numPassed > 0;
  const counted = `${s.numPassed}/${s.numTests - s.numSkipped} passed${s.numSkipped ? `, ${s.numSkipped} skipped` : ''}`;
  return { name: `ops ${name}`, kind: 'ops', passed, detail: s.failedNames.length ? `${counted}; failed: ${s.failedNames.slice(0, 5).join(', ')}` : counted };
}
