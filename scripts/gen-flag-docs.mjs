// Writes docs/flags.md from the commander definitions of every command (npm run docs:flags).
// --check: exit 1, naming the file, when docs/flags.md differs from what the definitions give.
import { readFileSync, writeFileSync } from 'node:fs';
import { quireCommands } from '../dist/src/cli/commands.js';
import { flagDocs } from '../dist/src/cli/flag-docs.js';

const file = 'docs/flags.md';
const text = flagDocs(quireCommands());
if (process.argv.includes('--check')) {
  if (readFileSync(file, 'utf8') !== text) {
    console.error(`${file} differs from the CLI's definitions: run npm run docs:flags`);
    process.exit(1);
  }
} else {
  writeFileSync(file, text);
  console.log(`wrote ${file}`);
}
