// What a user sees when a command fails: one line naming what went wrong and a non-zero exit, never a stack trace.
// Start-up warnings (process.emitWarning) become log lines of the same form.

import { ModelLoadError } from '../loader/errors.js';
import { SamplingParamError } from '../sampling/validate.js';

/** The exit code of a usage error (a bad flag or file: the user's to fix), as commander's. */
export const EXIT_USAGE = 2;

/** One line for an error: its message, with what kind of failure an unexpected one is. */
export function errorLine(e: unknown): string {
  if (e instanceof ModelLoadError || e instanceof SamplingParamError) return `quire: ${e.message}`;
  const errno = e as NodeJS.ErrnoException;
  if (e instanceof Error && typeof errno.code === 'string' && typeof errno.path === 'string') {
    const reason = e.message.replace(/^[A-Z]+: /, '').replace(/, \w+ '.*'$/, '');
    return `quire: ${errno.path}: ${reason}`;
  }
  if (e instanceof Error) {
    const internal = e instanceof TypeError || e instanceof RangeError || e instanceof ReferenceError;
    return internal ? `quire: internal error (${e.name}): ${e.message}; please report it with the command line`
      : `quire: ${e.message}`;
  }
  return `quire: ${String(e)}`;
}

/** Prints the error's line to stderr and exits non-zero. */
export function reportError(e: unknown, write: (s: string) => void = (s) => process.stderr.write(s)): never {
  write(errorLine(e) + '\n');
  process.exit(e instanceof ModelLoadError || e instanceof SamplingParamError ? EXIT_USAGE : 1);
}

/** Uncaught errors and rejections end the process with reportError's line; warnings print as quire log lines. */
export function installErrorHandlers(): void {
  process.on('uncaughtException', (e) => reportError(e));
  process.on('unhandledRejection', (e) => reportError(e));
  process.removeAllListeners('warning');
  process.on('warning', (w) => process.stderr.write(`quire: warning: ${w.message}\n`));
}
