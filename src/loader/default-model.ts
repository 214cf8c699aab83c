import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root, found from this file whether run from src/ or dist/src/. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find the quire package root');
    dir = up;
  }
  return dir;
}

/** The bundled demo model (models/quire-demo), the default for every command and for `new LLM()`. */
export function defaultModelDir(): string {
  return resolve(packageRoot(), 'models', 'quire-demo');
}
