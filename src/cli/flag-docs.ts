// docs/flags.md, generated from the commander definitions of every command (scripts/gen-flag-docs.mjs writes it;
// test/docs/flags-doc.test.ts fails when the file and the definitions differ).

import type { Command, Option } from 'commander';
import { packageRoot } from '../loader/default-model.js';

const HEADER = `# Every command and flag

<!-- Generated from the CLI's definitions by \`npm run docs:flags\` (scripts/gen-flag-docs.mjs): do not edit. -->

Each command also takes \`--help\`. Pass flags to \`npm start\` after \`--\`: \`npm start -- --port 8080\`.
How vLLM's flags map to Quire's: [vllm-flags.md](vllm-flags.md). Environment variables (\`QUIRE_*\`):
[knobs.md](knobs.md).
`;

function cell(text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ');
}

/** Prose in a cell: also `<` escaped, so `<think>` is text, not HTML. */
function prose(text: string): string {
  return cell(text).replaceAll('<', '&lt;');
}

function shown(value: unknown): string {
  const root = packageRoot();
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.replaceAll(root, '<package>');
}

function optionRow(o: Option): string {
  const parts = [o.description];
  if (o.argChoices) parts.push(`one of: ${o.argChoices.map((c) => `\`${c}\``).join(', ')}`);
  if (o.mandatory) parts.push('required');
  const fallback = o.defaultValue !== undefined && !(o.negate && o.defaultValue === true) && o.defaultValue !== false
    ? `\`${shown(o.defaultValue)}\`` : '';
  return `| \`${cell(o.flags)}\` | ${cell(fallback)} | ${prose(parts.filter((p) => p).join('; '))} |`;
}

function section(cmd: Command, path: string[]): string[] {
  const name = [...path, cmd.name()].join(' ');
  const args = cmd.registeredArguments.map((a) => (a.required ? `<${a.name()}>` : `[${a.name()}]`));
  const options = cmd.options.filter((o) => !o.hidden);
  const out = [`## ${name}`, '', prose(cmd.description()), ''];
  out.push('```', [name, ...args, options.length > 0 ? '[flags]' : ''].filter((s) => s).join(' '), '```', '');
  for (const a of cmd.registeredArguments) out.push(`- \`${a.name()}\`: ${prose(a.description)}`);
  if (cmd.registeredArguments.length > 0) out.push('');
  if (options.length > 0) {
    out.push('| flag | default | what it does |', '|---|---|---|', ...options.map(optionRow), '');
  }
  for (const sub of cmd.commands) out.push(...section(sub, [...path, cmd.name()]));
  return out;
}

/** The whole page for these top-level commands (each `quire <name>`). */
export function flagDocs(commands: readonly Command[]): string {
  const toc = commands.flatMap((c) => [c, ...c.commands].map((x) => {
    const name = x === c ? `quire ${c.name()}` : `quire ${c.name()} ${x.name()}`;
    return `- [${name}](#${name.replaceAll(' ', '-')})${x === c ? '' : ' (subcommand)'}`;
  }));
  const body = commands.flatMap((c) => section(c, ['quire']));
  return `${HEADER}\n${toc.join('\n')}\n\n${body.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd()}\n`;
}
