// Replays the reliability fuzzer's seeded bodies against a running server:
//   node scripts/fuzz-serve.mjs http://127.0.0.1:8000 [--seed 38] [--bodies 5000] [--concurrency 8]
// Prints the statuses and every 5xx, hang or non-OpenAI error; exits 1 if there was one. Needs `npm run build`.
import { fuzzBody } from '../dist/test/reliability/fuzz-bodies.js';

const args = process.argv.slice(2);
const url = args.find((a) => a.startsWith('http'));
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
if (!url) {
  console.error('usage: node scripts/fuzz-serve.mjs <base-url> [--seed n] [--bodies n] [--concurrency n]');
  process.exit(2);
}
const seed = opt('--seed', 38);
const numBodies = opt('--bodies', 5000);
const concurrency = opt('--concurrency', 8);
const counts = {};
const failures = [];
let next = 0;
async function worker() {
  while (next < numBodies) {
    const i = next++;
    const { path, body } = fuzzBody(seed, i);
    try {
      const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(30_000) });
      const text = await res.text();
      counts[res.status] = (counts[res.status] ?? 0) + 1;
      if (res.status >= 500) failures.push(`#${i} ${path}: ${res.status} ${text.slice(0, 200)}`);
    } catch (e) {
      failures.push(`#${i} ${path}: ${e.message}`);
    }
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));
console.log(`seed ${seed}, ${numBodies} bodies: ${JSON.stringify(counts)}`);
for (const f of failures) console.log(f);
process.exit(failures.length > 0 ? 1 : 0);
