// `import { LLM, serve } from 'quire'` from a TypeScript project: the packed package (npm pack) is unpacked into a
// consumer's node_modules, the consumer type-checks against its declaration files (an option misspelt is a type
// error) and runs: the LLM class on the demo model, then serve() answering a completion.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const CONSUMER = `import { LLM, serve, type LLMSamplingParams, type RunningServer } from 'quire';

const params: LLMSamplingParams = { max_tokens: 5, temperature: 0, ignore_eos: true };
const llm = new LLM({ backend: 'cpu', cpu_threads: 1, max_model_len: 256 });
const [out] = await llm.generate('In the beginning', params);
await llm.close();
export function typeErrors(): void {  // never called: tsc must refuse both lines
  // @ts-expect-error: max_tokens is a number
  void llm.generate('x', { max_tokens: 'many' });
  // @ts-expect-error: not an engine option
  void new LLM({ max_len: 3 });
}

const server: RunningServer = await serve({ port: 0, engine: { backend: 'cpu', cpuThreads: 1 } });
const r = await fetch(server.url + '/v1/completions', {
  method: 'POST', headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ prompt: 'In the beginning', max_tokens: 3, temperature: 0 }),
});
const body = await r.json() as { model: string; usage: { completion_tokens: number } };
await server.close();
console.log(JSON.stringify({ llmTokens: out!.tokenIds.length, model: body.model, served: body.usage.completion_tokens }));
`;

test('a TypeScript project type-checks and runs against the packed package', async () => {
  const root = resolve('.');
  // inside the repository, so the consumer resolves quire's dependencies and @types/node from its node_modules
  const dir = mkdtempSync(join(root, 'dist', 'consumer-'));
  try {
    const pack = spawnSync('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', dir],
      { cwd: root, encoding: 'utf8' });
    assert.equal(pack.status, 0, pack.stderr);
    const tarball = join(dir, pack.stdout.trim().split('\n').at(-1)!);
    mkdirSync(join(dir, 'node_modules', 'quire'), { recursive: true });
    const untar = spawnSync('tar', ['xzf', tarball, '-C', join(dir, 'node_modules', 'quire'), '--strip-components=1']);
    assert.equal(untar.status, 0, String(untar.stderr));
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', type: 'module', private: true }));
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true,
        types: ['node'], outDir: 'out' },
      include: ['main.ts'],
    }));
    writeFileSync(join(dir, 'main.ts'), CONSUMER);
    const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir],
      { encoding: 'utf8' });
    assert.equal(tsc.status, 0, `tsc:\n${tsc.stdout}${tsc.stderr}`);
    const run = spawnSync(process.execPath, [join(dir, 'out', 'main.js')], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout.trim().split('\n').at(-1)!), { llmTokens: 5, model: 'quire-demo', served: 3 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
