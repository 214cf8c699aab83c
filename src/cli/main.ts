#!/usr/bin/env node
// quire: serve, generate, chat, bench, gate, make-test-model.

import '../knobs/check-env.js';
import { QUIRE_VERSION } from '../version.js';
import { Command } from 'commander';
import { benchCommand } from './bench.js';
import { chatCommand } from './chat.js';
import { generateCommand } from './generate.js';
import { gateCommand } from './gate.js';
import { makeTestModelCommand } from './make-test-model.js';
import { vllmShortFlags } from './engine-flags.js';
import { serveCommand } from './serve.js';
import { installErrorHandlers, reportError } from './errors.js';

installErrorHandlers();
const program = new Command('quire')
  .description('LLM inference server on Node.js: paged KV cache, continuous batching, CUDA from TypeScript')
  .version(QUIRE_VERSION)
  .addCommand(serveCommand())
  .addCommand(generateCommand())
  .addCommand(chatCommand())
  .addCommand(benchCommand())
  .addCommand(gateCommand())
  .addCommand(makeTestModelCommand());

try {
  await program.parseAsync(vllmShortFlags(process.argv));
} catch (e) {
  reportError(e);
}
