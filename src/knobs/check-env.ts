// Imported first by the CLI's entry (ES modules evaluate their imports in order): checks every QUIRE_* variable
// before any module that reads one at load time, so a bad value ends start-up with one line naming it.

import { checkKnobs } from './knobs.js';

const { errors, warnings } = checkKnobs();
for (const w of warnings) process.stderr.write(`quire: warning: ${w}\n`);
if (errors.length > 0) {
  for (const e of errors) process.stderr.write(`quire: ${e}\n`);
  process.exit(2);
}
