// A model named as vLLM takes it, `org/name`, found in the local Hugging Face cache (what `huggingface-cli download`,
// transformers or vLLM left there): $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, as
// models--org--name/snapshots/<commit>, the commit that refs/main names (or the only snapshot). Quire downloads
// nothing.

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ModelLoadError } from './errors.js';

const REPO_ID = /^[\w.-]+\/[\w.-]+$/;

/** The hub cache folder the environment names. */
export function hubCacheDir(env = process.env): string {
  return env.HF_HUB_CACHE ?? join(env.HF_HOME ?? join(homedir(), '.cache', 'huggingface'), 'hub');
}

/**
 * `model` itself when it is a directory (or not a repo id); else the cached snapshot of repo id `model`, or a
 * ModelLoadError saying where it looked and how to get it.
 */
export function resolveModelPath(model: string, env = process.env): string {
  if (existsSync(model) || !REPO_ID.test(model)) return model;
  const repo = join(hubCacheDir(env), `models--${model.replace('/', '--')}`);
  const snapshots = join(repo, 'snapshots');
  const ref = join(repo, 'refs', 'main');
  if (existsSync(ref)) {
    const dir = join(snapshots, readFileSync(ref, 'utf8').trim());
    if (existsSync(dir)) return dir;
  }
  const found = existsSync(snapshots) ? readdirSync(snapshots).filter((s) => statSync(join(snapshots, s)).isDirectory()) : [];
  if (found.length === 1) return join(snapshots, found[0]!);
  throw new ModelLoadError(repo, found.length > 1
    ? `model ${model} has ${found.length} snapshots and no refs/main in the Hugging Face cache (${snapshots}); pass the snapshot's directory`
    : `model ${model} is neither a directory nor in the Hugging Face cache (looked in ${repo}); Quire downloads nothing: `
      + `run \`huggingface-cli download ${model}\` first, or pass a model directory`);
}
