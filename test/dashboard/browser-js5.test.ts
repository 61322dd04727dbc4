/**
 * The js5 page in headless Chromium against a spawned `gamewire serve js5` (port 0) with a real
 * Js5Client: its connection shows with the bytes served, the cache's archives are listed, a request
 * appears in the wire view, and a disconnect from the page closes the client's connection.
 * GAMEWIRE_SCREENSHOTS=1 writes docs/images/dashboard-js5.png.
 */
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Js5Client } from '../../src/protocols/js5/client.js';
import {
  haveChromium,
  launchBrowser,
  type Serve,
  screenshot,
  startServe,
  watchPage,
} from './browser-helpers.js';

const POLL = { timeout: 45_000, interval: 250 };

let browser: Awaited<ReturnType<typeof launchBrowser>> | undefined;
let serve: Serve | undefined;
let client: Js5Client | undefined;

beforeAll(async () => {
  if (!haveChromium) return;
  [browser, serve] = await Promise.all([launchBrowser(), startServe(['js5'])]);
}, 120_000);

afterAll(async () => {
  await client?.close().catch(() => {});
  await browser?.close();
  await serve?.stop();
}, 60_000);

async function open(route: string): Promise<{ page: Page; problems: string[] }> {
  if (serve!.child.exitCode !== null || serve!.child.signalCode !== null)
    throw new Error(`gamewire serve has exited:\n${serve!.stderr()}`);
  const page = await browser!.browser.newPage();
  const problems = watchPage(page);
  await page.goto(`${serve!.adminUrl}/#${route}`);
  return { page, problems };
}

describe.runIf(haveChromium)('the js5 page in headless Chromium', () => {
  it('a client downloading: its connection, bytes served, the archives, its request on the wire; then a disconnect from the page', async () => {
    const tcp = serve!.endpoint('js5', 'tcp');
    client = await Js5Client.connect({ host: '127.0.0.1', port: tcp.port, build: 530, profile: '530' });
    const index = await client.masterIndex();
    expect(index).toBeDefined();
    const { page, problems } = await open('/js5');
    const rows = page.locator('[data-testid="connection-row"]');
    await expect.poll(() => rows.count(), POLL).toBe(1);
    await expect
      .poll(
        async () =>
          Number(await rows.first().locator('[data-testid="conn-bytes"]').getAttribute('data-value')),
        POLL,
      )
      .toBeGreaterThan(0);
    await expect.poll(() => page.locator('[data-testid="archive-row"]').count(), POLL).toBeGreaterThan(0);
    await screenshot(page, 'js5');

    // The wire view: a request for the master index, decoded.
    await page.goto(`${serve!.adminUrl}/#/js5/wire`);
    await expect.poll(() => page.locator('[data-testid="wire-info"]').innerText(), POLL).toContain('kept');
    const asking = setInterval(() => {
      client!.request(255, 255, true).catch(() => {});
    }, 700);
    try {
      await page.locator('[data-testid="filter-direction"]').selectOption('client');
      const row = page.locator('[data-testid="wire-row"]').first();
      await expect.poll(() => row.count(), POLL).toBe(1);
      await row.click();
      await expect.poll(() => page.locator('[data-testid="field-tree"]').count(), POLL).toBe(1);
      expect(await page.locator('[data-testid="field-tree"]').innerText()).toMatch(/255/);
    } finally {
      clearInterval(asking);
    }

    await page.goto(`${serve!.adminUrl}/#/js5`);
    await expect.poll(() => rows.count(), POLL).toBe(1);
    await rows.first().locator('[data-testid="disconnect"]').click();
    await page.locator('[data-testid="confirm-ok"]').click();
    await expect.poll(() => rows.count(), POLL).toBe(0);
    await expect(client.request(255, 255, true)).rejects.toThrow(/closed/);
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);
});
