#!/usr/bin/env node
// quire: serve, generate, chat, bench, gate, make-test-model.

import '../knobs/check-env.js';
import { QUIRE_VERSION } from '../version.js';
import { Command } from 'commander';
import { ModelLoadError } from '../loader/errors.js';
import { SamplingParamError } from '../sampling/validate.js';
import { benchCommand } from './bench.js';
import { chatCommand, generateCommand } from './generate.js';
import { gateCommand } from './gate.js';
import { makeTestModelCommand } from './make-test-model.js';
import { vllmShortFlags } from './engine-flags.js';
import { serveCommand } from './serve.js';

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
  if (e instanceof ModelLoadError || e instanceof SamplingParamError) {
    console.error(`quire: ${e.message}`);
    process.exit(2);
  }
  throw e;
}
