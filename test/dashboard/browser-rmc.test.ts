/**
 * The rmc page in headless Chromium against a spawned `gamewire serve rmc` (port 0) with a real
 * RmcClient: a call just made appears decoded in the wire view and in the recent calls, and a
 * disconnect from the page closes the client's connection.
 * GAMEWIRE_SCREENSHOTS=1 writes docs/images/dashboard-rmc.png.
 */
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RmcClient } from '../../src/protocols/rmc/client.js';
import { LoginProtocol } from '../../src/protocols/rmc/protocols/login.js';
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
const rmcClients: RmcClient[] = [];

beforeAll(async () => {
  if (!haveChromium) return;
  [browser, serve] = await Promise.all([launchBrowser(), startServe(['rmc'])]);
}, 120_000);

afterAll(async () => {
  for (const c of rmcClients) await c.close().catch(() => {});
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

describe.runIf(haveChromium)('the rmc page in headless Chromium', () => {
  it('rmc: a call just made shows in the wire view decoded and in the recent calls', async () => {
    const tcp = serve!.endpoint('rmc', 'tcp');
    const client = await RmcClient.connect({ host: '127.0.0.1', port: tcp.port });
    rmcClients.push(client);
    const { page, problems } = await open('/rmc/wire');
    await expect.poll(() => page.locator('[data-testid="wire-info"]').innerText(), POLL).toContain('kept');
    const url = `prudp:/address=10.9.8.7;port=${3000 + Math.floor(Math.random() * 1000)};sid=15`;
    const calling = setInterval(() => {
      client.call(LoginProtocol, 'Register_V1', { vecMyURLs: [url] }).catch(() => {});
    }, 700);
    try {
      await page.locator('[data-testid="filter-text"]').fill(url.slice(14));
      const row = page.locator('[data-testid="wire-row"][data-direction="client"]').first();
      await expect.poll(() => row.count(), POLL).toBe(1);
      await row.click();
      const tree = await page.locator('[data-testid="field-tree"]').innerText();
      expect(tree).toContain('Register_V1');
      expect(tree).toContain(url.slice(14));
      await page.goto(`${serve!.adminUrl}/#/rmc`);
      await expect.poll(() => page.locator('[data-testid="call-row"]').count(), POLL).toBeGreaterThan(0);
      expect(await page.locator('[data-testid="call-method"]').first().innerText()).toMatch(/Register/);
      expect(await page.locator('[data-testid="call-result"]').first().innerText()).toBe('ok');
      await expect.poll(() => page.locator('[data-testid="connection-row"]').count(), POLL).toBe(1);
      await expect
        .poll(() => page.locator('[data-testid="call-row"]').count(), POLL)
        .toBeGreaterThanOrEqual(4);
      await screenshot(page, 'rmc');
    } finally {
      clearInterval(calling);
    }
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);

  it('a disconnect from the page drops that client (the client sees the close)', async () => {
    const tcp = serve!.endpoint('rmc', 'tcp');
    // A fresh client: after the previous test's, this is the only other rmc connection.
    for (const c of rmcClients.splice(0)) await c.close();
    const client = await RmcClient.connect({ host: '127.0.0.1', port: tcp.port });
    rmcClients.push(client);
    await client.call(LoginProtocol, 'Register_V1', { vecMyURLs: ['prudp:/address=10.0.0.1;port=1;sid=15'] });
    const { page, problems } = await open('/rmc');
    const rows = page.locator('[data-testid="connection-row"]');
    await expect.poll(() => rows.count(), POLL).toBe(1);
    await rows.first().locator('[data-testid="disconnect"]').click();
    await expect(page.locator('[data-testid="confirm-dialog"]')).toBeTruthy();
    await page.locator('[data-testid="confirm-ok"]').click();
    await expect.poll(() => client.closed, POLL).toBe(true);
    await expect.poll(() => rows.count(), POLL).toBe(0);
    await expect(client.call(LoginProtocol, 'Register_V1', { vecMyURLs: [] })).rejects.toThrow();
    expect(await page.locator('[data-testid="error"]').count()).toBe(0);
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);
});
