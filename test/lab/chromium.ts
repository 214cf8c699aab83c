// Headless Chromium (Debian's `chromium` package) for the HTML-report tests; they skip without it.

import { existsSync } from 'node:fs';
import type { Browser } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
/** false when Chromium is installed, otherwise the skip reason. */
export const noChromium: string | false = existsSync(CHROMIUM) ? false
  : `Chromium not found at ${CHROMIUM} (install Debian's chromium package: apt-get install chromium)`;

export async function launchChromium(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
}
