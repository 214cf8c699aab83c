// The commands of `quire`, as main.ts adds them (docs/flags.md is generated from this list).

import type { Command } from 'commander';
import { benchCommand } from './bench.js';
import { chatCommand } from './chat.js';
import { generateCommand } from './generate.js';
import { gateCommand } from './gate.js';
import { makeTestModelCommand } from './make-test-model.js';
import { serveCommand } from './serve.js';

export function quireCommands(): Command[] {
  return [serveCommand(), generateCommand(), chatCommand(), benchCommand(), gateCommand(), makeTestModelCommand()];
}
