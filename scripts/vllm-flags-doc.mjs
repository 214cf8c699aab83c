// Writes docs/vllm-flags.md from the list in src/cli/vllm-flags.ts (run after npm run build).
import { writeFileSync } from 'node:fs';
import { vllmFlagMarkdown } from '../dist/src/cli/vllm-flags.js';

writeFileSync(new URL('../docs/vllm-flags.md', import.meta.url), vllmFlagMarkdown());
console.log('docs/vllm-flags.md written');
