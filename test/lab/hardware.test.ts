import { test } from 'node:test';
import assert from 'node:assert/strict';
import { collectProvenance, cpuModel, parseNvidiaSmiGpus, provenanceRows } from '../../src/lab/hardware.js';

const SMI = '0, NVIDIA H100 80GB HBM3, 550.54.15, 9.0, 81559\n1, NVIDIA H100 80GB HBM3, 550.54.15, 9.0, 81559 MiB\n';

test('nvidia-smi GPU lines parse to name, driver, compute capability, memory', () => {
  const gpus = parseNvidiaSmiGpus(SMI);
  assert.equal(gpus.length, 2);
  assert.deepEqual(gpus[0], { index: 0, name: 'NVIDIA H100 80GB HBM3', driverVersion: '550.54.15', computeCapability: '9.0', memoryTotalMiB: 81559 });
  assert.equal(gpus[1]!.memoryTotalMiB, 81559);
  assert.throws(() => parseNvidiaSmiGpus('garbage'), /unexpected nvidia-smi line/);
});

test('CPU model from /proc/cpuinfo', () => {
  assert.equal(cpuModel('processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n'), 'AMD EPYC 9654 96-Core Processor');
});

test('provenance: GPUs, commit and dirty flag, CUDA versions, config', async () => {
  const calls: string[] = [];
  const run = (cmd: string, args: string[]) => {
    calls.push(`${cmd} ${args.join(' ')}`);
    if (cmd === 'nvidia-smi') return SMI;
    if (args.includes('rev-parse')) return 'abc123\n';
    if (args.includes('status')) return ' M src/x.ts\n';
    return null;
  };
  const p = await collectProvenance({ run, config: { model: 'qwen3-0.6b', maxNumSeqs: 256 }, cudaVersions: () => ({ cublasLt: '12.8.4', nvrtc: '12.8' }) });
  assert.equal(p.gpus.length, 2);
  assert.deepEqual(p.git, { commit: 'abc123', dirty: true });
  assert.deepEqual(p.cudaLibraries, { cublasLt: '12.8.4', nvrtc: '12.8' });
  assert.deepEqual(p.config, { model: 'qwen3-0.6b', maxNumSeqs: 256 });
  assert.equal(p.nodeVersion, process.version);
  assert.ok(p.host.numCpuCores > 0);
  assert.ok(!Number.isNaN(Date.parse(p.time)));
  const rows = Object.fromEntries(provenanceRows(p));
  assert.equal(rows['gpu 0'], 'NVIDIA H100 80GB HBM3, driver 550.54.15, sm 9.0, 81559 MiB');
  assert.equal(rows['commit'], 'abc123 (dirty)');
  assert.ok(calls.some((c) => c.startsWith('nvidia-smi --query-gpu=')));

  const bare = await collectProvenance({ run: () => null });
  assert.deepEqual(bare.gpus, []);
  assert.equal(bare.git, null);
  assert.equal(bare.cudaLibraries, null);
  assert.equal(Object.fromEntries(provenanceRows(bare))['gpu'], 'none');
});
