/**
 * Off loopback the dashboard needs the admin token: a `gamewire serve` bound to 0.0.0.0 with
 * `--admin-token`, reached by Chromium at this machine's non-loopback address (127.0.0.1 when the
 * machine has none): without the token the page and every API answer 401 and carry no state;
 * `/?token=…` once sets the cookie and the page works, stream included.
 */
import { randomBytes } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveChromium, launchBrowser, type Serve, startServe, watchPage } from './browser-helpers.js';

const POLL = { timeout: 45_000, interval: 250 };
const TOKEN = randomBytes(18).toString('base64url');

function externalAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return undefined;
}

const address = externalAddress() ?? '127.0.0.1';
let browser: Awaited<ReturnType<typeof launchBrowser>> | undefined;
let serve: Serve | undefined;

beforeAll(async () => {
  if (!haveChromium) return;
  [browser, serve] = await Promise.all([
    launchBrowser(),
    startServe(['nox-relay'], { adminHost: '0.0.0.0', adminToken: TOKEN }),
  ]);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await serve?.stop();
});

describe.runIf(haveChromium)(`the dashboard off loopback (${address}), token required`, () => {
  it('without the token: 401 for the page and the API, and nothing of the state in the browser', async () => {
    const base = `http://${address}:${serve!.adminPort}`;
    const page = await browser!.browser.newPage();
    const res = await page.goto(`${base}/`);
    expect(res!.status()).toBe(401);
    const text = await page.locator('body').innerText();
    expect(text).toMatch(/error/);
    const nox = serve!.endpoint('nox-relay', 'udp');
    for (const leak of ['nox-relay', String(nox.port), 'counters', 'server-card'])
      expect(text).not.toContain(leak);
    // The API from inside the page (same origin, no cookie): 401 with only an error.
    const answers = await page.evaluate(async () => {
      const out: { status: number; body: string }[] = [];
      for (const p of [
        '/api/session',
        '/api/servers',
        '/api/servers/nox-relay',
        '/api/wire/nox-relay',
        '/assets/app.js',
        '/metrics',
      ]) {
        const r = await fetch(p);
        out.push({ status: r.status, body: await r.text() });
      }
      return out;
    });
    for (const a of answers) {
      expect(a.status).toBe(401);
      expect(Object.keys(JSON.parse(a.body))).toEqual(['error']);
    }
    // A wrong token is no better.
    const wrong = await page.goto(`${base}/?token=${TOKEN}x`);
    expect(wrong!.status()).toBe(401);
    expect(await page.locator('[data-testid="server-card"]').count()).toBe(0);
    await page.close();
  }, 120_000);

  it('with /?token= once: the cookie opens the page, the API and the stream', async () => {
    const base = `http://${address}:${serve!.adminPort}`;
    const page = await browser!.browser.newPage();
    const problems = watchPage(page);
    await page.goto(`${base}/?token=${encodeURIComponent(TOKEN)}`);
    expect(new URL(page.url()).search).toBe(''); // the token left the address bar
    await expect
      .poll(() => page.locator('[data-testid="server-card"][data-protocol="nox-relay"]').count(), POLL)
      .toBe(1);
    await expect.poll(() => page.locator('[data-testid="status"]').innerText(), POLL).toBe('live');
    await expect
      .poll(() => page.evaluate(() => (globalThis as any).gamewireDashboard.ticks as number), POLL)
      .toBeGreaterThan(1);
    // The cookie is HttpOnly: the page's scripts never see the token.
    expect(await page.evaluate(() => (globalThis as any).document.cookie)).not.toContain(TOKEN);
    expect(await page.content()).not.toContain(TOKEN);
    // Nor does the session answer, where the page gets its action token.
    const session = await page.evaluate(async () => (await (globalThis as any).fetch('/api/session')).text());
    expect(session).toContain('actionToken');
    expect(session).not.toContain(TOKEN);
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);
});
