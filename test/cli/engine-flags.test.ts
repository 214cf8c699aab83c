// Engine flags reach EngineOptions: --profile turns on the CUDA profile tables.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Command } from 'commander';
import { addEngineFlags, engineOptionsFromFlags } from '../../src/cli/engine-flags.js';

function parse(argv: string[]): Record<string, unknown> {
  const cmd = addEngineFlags(new Command('x')).exitOverride();
  cmd.parse(argv, { from: 'user' });
  return cmd.opts();
}

test('--profile sets EngineOptions.profile; off by default', () => {
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m', '--profile'])).profile, true);
  assert.equal(engineOptionsFromFlags(parse(['--model', '/m'])).profile, false);
});
