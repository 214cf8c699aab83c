import { basename } from 'node:path';

/** A model file that cannot be used; the message names the file and the problem. */
export class ModelLoadError extends Error {
  readonly file: string;

  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(`${basename(file)}: ${problem}`, options);
    this.name = 'ModelLoadError';
    this.file = file;
  }
}

export function describeError(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
