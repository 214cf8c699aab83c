// Provenance of a result: the machine, the commit, the configuration, the time.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';

/** Runs a command and returns its stdout, or null when it is missing or fails. */
export type CommandRunner = (cmd: string, args: string[]) => string | null;

export const runCommand: CommandRunner = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return null;
  }
};

export interface GpuInfo {
  index: number;
  name: string;
  driverVersion: string;
  computeCapability: string;
  memoryTotalMiB: number;
}

export interface HostInfo {
  hostname: string;
  platform: string;
  kernel: string;
  cpuModel: string;
  numCpuCores: number;
  memoryTotalGiB: number;
}

export interface Provenance {
  time: string;
  gpus: GpuInfo[];
  host: HostInfo;
  /** Library name -> version, when a way to ask was given. */
  cudaLibraries: Record<string, string> | null;
  git: { commit: string; dirty: boolean } | null;
  nodeVersion: string;
  config: unknown;
}

export const NVIDIA_SMI_GPU_QUERY = ['--query-gpu=index,name,driver_version,compute_cap,memory.total', '--format=csv,noheader,nounits'];

/** Parses `nvidia-smi --query-gpu=index,name,driver_version,compute_cap,memory.total --format=csv,noheader,nounits`. */
export function parseNvidiaSmiGpus(csv: string): GpuInfo[] {
  return csv
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0)
    .map((line) => {
      const f = line.split(',').map((s) => s.trim());
      if (f.length < 5) throw new Error(`unexpected nvidia-smi line: ${line}`);
      return {
        index: Number(f[0]),
        name: f[1]!,
        driverVersion: f[2]!,
        computeCapability: f[3]!,
        memoryTotalMiB: Number.parseFloat(f[4]!.replace(/\s*MiB$/, '')),
      };
    });
}

export function cpuModel(cpuinfo: string | null): string {
  const m = cpuinfo ? /^model name\s*:\s*(.+)$/m.exec(cpuinfo) : null;
  return m ? m[1]!.trim() : (os.cpus()[0]?.model ?? 'unknown');
}

export interface ProvenanceOptions {
  config?: unknown;
  /** Asks the CUDA libraries for their versions (the backend knows how). */
  cudaVersions?: () => Record<string, string> | Promise<Record<string, string>>;
  run?: CommandRunner;
  /** Repository to take the commit from. */
  cwd?: string;
}

export async function collectProvenance(opts: ProvenanceOptions = {}): Promise<Provenance> {
  const run = opts.run ?? runCommand;
  const smi = run('nvidia-smi', NVIDIA_SMI_GPU_QUERY);
  const gpus = smi ? parseNvidiaSmiGpus(smi) : [];
  let cpuinfo: string | null = null;
  try {
    cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    cpuinfo = null;
  }
  const gitArgs = opts.cwd ? ['-C', opts.cwd] : [];
  const commit = run('git', [...gitArgs, 'rev-parse', 'HEAD'])?.trim();
  const status = commit ? run('git', [...gitArgs, 'status', '--porcelain', '--untracked-files=no']) : null;
  let cudaLibraries: Record<string, string> | null = null;
  if (opts.cudaVersions) {
    try {
      cudaLibraries = await opts.cudaVersions();
    } catch (e) {
      cudaLibraries = { error: (e as Error).message };
    }
  }
  return {
    time: new Date().toISOString(),
    gpus,
    host: {
      hostname: os.hostname(),
      platform: `${os.platform()} ${os.arch()}`,
      kernel: os.release(),
      cpuModel: cpuModel(cpuinfo),
      numCpuCores: os.cpus().length,
      memoryTotalGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    },
    cudaLibraries,
    git: commit ? { commit, dirty: (status ?? '').trim().length > 0 } : null,
    nodeVersion: process.version,
    config: opts.config ?? null,
  };
}

/** Rows of (label, value) for reports. */
export function provenanceRows(p: Provenance): [string, string][] {
  const rows: [string, string][] = [['time', p.time]];
  if (p.gpus.length === 0) rows.push(['gpu', 'none']);
  for (const g of p.gpus) {
    rows.push([`gpu ${g.index}`, `${g.name}, driver ${g.driverVersion}, sm ${g.computeCapability}, ${g.memoryTotalMiB} MiB`]);
  }
  rows.push(['cpu', `${p.host.cpuModel} (${p.host.numCpuCores} cores), ${p.host.memoryTotalGiB} GiB`]);
  rows.push(['host', `${p.host.hostname}, ${p.host.platform}, kernel ${p.host.kernel}`]);
  if (p.cudaLibraries) rows.push(['cuda libraries', Object.entries(p.cudaLibraries).map(([k, v]) => `${k} ${v}`).join(', ')]);
  rows.push(['commit', p.git ? `${p.git.commit}${p.git.dirty ? ' (dirty)' : ''}` : 'unknown']);
  rows.push(['node', p.nodeVersion]);
  rows.push(['config', JSON.stringify(p.config)]);
  return rows;
}
