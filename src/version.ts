// Quire's version, from its package.json (dist/src/version.js and src/version.ts both sit two levels below it).

import { readFileSync } from 'node:fs';

export const QUIRE_VERSION: string = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
