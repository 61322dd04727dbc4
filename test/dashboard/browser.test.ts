/**
 * The dashboard in a real browser: headless Chromium (playwright-core) on the page served by a
 * spawned `gamewire serve` (every port 0), with real clients: 20 nox-relay bots (the CLI), a Unity
 * Relay chat (host and joiner through the client library), a NoxRelayClient. Checks what a
 * person would look at: counts, the moving map, growing charts, the allocation's traffic, a just
 * sent message decoded in the wire view, and a disconnect from the page reaching the client.
 * GAMEWIRE_SCREENSHOTS=1 writes docs/images/dashboard-*.png.
 *
 * The bots and the chat start with the server. The nox-relay pages and the Unity Relay pages run
 * at once, each in a tab of its own; on each side the page that acts (disconnects a nox client,
 * ends the chat's allocation) comes after the ones that look.
 */
import { randomBytes } from 'node:crypto';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { NoxRelayClient } from '../../src/protocols/nox-relay/client.js';
import { RelayApiClient, UnityRelayClient } from '../../src/protocols/unity-relay/client.js';
import {
  haveChromium,
  launchBrowser,
  SCREENSHOTS,
  type Serve,
  screenshot,
  spawnCli,
  startServe,
  watchPage,
} from './browser-helpers.js';

const POLL = { timeout: 45_000, interval: 250 };

let browser: Awaited<ReturnType<typeof launchBrowser>> | undefined;
let serve: Serve | undefined;
let bots: ReturnType<typeof spawnCli> | undefined;
let chat:
  | {
      host: UnityRelayClient;
      joiner: UnityRelayClient;
      joinCode: string;
      say(text: string): void;
      timer: NodeJS.Timeout;
      allocationId: string;
    }
  | undefined;
const noxClients: NoxRelayClient[] = [];

beforeAll(async () => {
  if (!haveChromium) return;
  const [launched, served] = await Promise.allSettled([launchBrowser(), startServe([])]);
  if (launched.status === 'fulfilled') browser = launched.value;
  if (served.status === 'fulfilled') serve = served.value;
  if (launched.status === 'rejected') throw launched.reason;
  if (served.status === 'rejected') throw served.reason;
  const server = served.value;
  // The clients the pages show: 20 nox-relay bots (the CLI) in instance 0, and a Unity Relay chat.
  const nox = server.endpoint('nox-relay', 'udp');
  bots = spawnCli([
    'nox-relay',
    'bots',
    '--count',
    '20',
    '--instance',
    '0',
    '--host',
    '127.0.0.1',
    '--port',
    String(nox.port),
    '--duration',
    '600',
  ]);
  const api = new RelayApiClient(`http://127.0.0.1:${server.endpoint('unity-relay', 'http').port}`);
  const { client: host, joinCode, allocation } = await UnityRelayClient.host(api, 4);
  const joiner = await UnityRelayClient.join(api, joinCode);
  host.on('message', (data: Buffer, from: Buffer) =>
    host.send(Buffer.from(`[host] got ${data.toString()}`), from),
  );
  let n = 0;
  // Once the test that ends the host's allocation has run, the joiner has no peer: sends then fail.
  const say = (text: string) => {
    try {
      joiner.send(Buffer.from(text));
    } catch {}
  };
  const timer = setInterval(() => say(`chat line ${++n}`), 200);
  chat = { host, joiner, joinCode, say, timer, allocationId: allocation.allocationId };
}, 120_000);

afterAll(async () => {
  if (chat !== undefined) {
    clearInterval(chat.timer);
    await Promise.allSettled([chat.host.close(), chat.joiner.close()]);
  }
  for (const c of noxClients) await c.disconnect().catch(() => {});
  await bots?.stop();
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

const numberAttr = async (page: Page, selector: string, attr: string) =>
  Number((await page.locator(selector).first().getAttribute(attr)) ?? Number.NaN);

describe.runIf(haveChromium)('the dashboard in headless Chromium', () => {
  // Two lanes at once, each page in a tab of its own: the nox-relay pages, then the disconnect of
  // a nox client; the Unity Relay pages, then the end of the chat's allocation.
  describe.concurrent('nox-relay', () => {
    // Retried for a loaded runner.
    it('with 20 nox-relay bots: the overview counts them, the charts grow, the nox page lists 20 players that move on the map', {
      timeout: 120_000,
      retry: 2,
      concurrent: false,
    }, async ({ expect }) => {
      const nox = serve!.endpoint('nox-relay', 'udp');
      const { page, problems } = await open('/');
      const card = '[data-testid="server-card"][data-protocol="nox-relay"]';
      await expect.poll(() => numberAttr(page, `${card} [data-testid="open"]`, 'data-value'), POLL).toBe(20);
      // Every running server has its card, with its endpoints.
      for (const p of ['unity-relay', 'nox-relay', 'rmc', 'js5']) {
        await expect
          .poll(() => page.locator(`[data-testid="server-card"][data-protocol="${p}"]`).count(), POLL)
          .toBe(1);
      }
      expect(await page.locator(`${card} [data-testid="endpoints"]`).innerText()).toContain(
        `127.0.0.1:${nox.port}`,
      );
      // The charts are uPlot's and get a point per tick.
      const chart = `${card} [data-testid="chart-messages"]`;
      expect(await page.locator(`${chart} .uplot canvas`).count()).toBeGreaterThan(0);
      const before = await numberAttr(page, chart, 'data-points');
      await expect
        .poll(() => numberAttr(page, chart, 'data-points'), POLL)
        .toBeGreaterThanOrEqual(before + 2);
      // 20 bots at 20 transforms a second each: the relay fans them out; the rate shows it.
      await expect
        .poll(
          async () => (await page.locator(`${card} [data-testid="msg-in"]`).innerText()).replace(/\D/g, ''),
          POLL,
        )
        .not.toBe('0');

      await page.goto(`${serve!.adminUrl}/#/nox-relay`);
      await expect.poll(() => numberAttr(page, '[data-testid="nox-summary"]', 'data-players'), POLL).toBe(20);
      await expect.poll(() => page.locator('[data-testid="player-row"]').count(), POLL).toBe(20);
      await expect.poll(() => numberAttr(page, '[data-testid="nox-map"]', 'data-players'), POLL).toBe(20);
      const drawn = () =>
        page.evaluate(
          () =>
            (globalThis as any).gamewireDashboard.map.drawnPositions() as Record<
              string,
              { x: number; y: number }
            >,
        );
      const first = await drawn();
      expect(Object.keys(first)).toHaveLength(20);
      // Between two later samples most of the 20 have moved (polled: a loaded machine may delay a tick).
      let second = first;
      const movedCount = async () => {
        second = await drawn();
        return Object.keys(first).filter(
          (id) =>
            second[id] !== undefined && (first[id]!.x !== second[id]!.x || first[id]!.y !== second[id]!.y),
        ).length;
      };
      await expect.poll(movedCount, POLL).toBeGreaterThan(10);
      expect(Object.keys(second)).toHaveLength(20);
      // Drawn inside the canvas.
      const box = await page.locator('[data-testid="nox-map"]').boundingBox();
      for (const p of Object.values(second)) {
        expect(p.x).toBeGreaterThanOrEqual(0);
        expect(p.x).toBeLessThanOrEqual(box!.width);
        expect(p.y).toBeGreaterThanOrEqual(0);
        expect(p.y).toBeLessThanOrEqual(box!.height);
      }
      await page.locator('[data-testid="map-panel"]').scrollIntoViewIfNeeded();
      await screenshot(page, 'nox-map');

      // The nox wire view under the bots' load: the page keeps at most 500 messages, and the
      // keyboard works the list (Enter selects, the arrow keys move).
      await page.goto(`${serve!.adminUrl}/#/nox-relay/wire`);
      const rows = page.locator('[data-testid="wire-row"]');
      await expect
        .poll(() => page.locator('[data-testid="wire-info"]').innerText(), POLL)
        .toMatch(/ of 500 kept/);
      expect(await rows.count()).toBe(500);
      const firstSeq = await rows.first().getAttribute('data-seq');
      await rows.first().focus();
      // While a row has focus the list holds still: new messages wait, and the info line says so.
      await expect
        .poll(() => page.locator('[data-testid="wire-info"]').innerText(), POLL)
        .toMatch(/held while a row has focus: [1-9]\d* new/);
      expect(await page.evaluate(() => (globalThis as any).document.activeElement?.dataset?.seq)).toBe(
        firstSeq,
      );
      expect(await rows.first().getAttribute('data-seq')).toBe(firstSeq);
      await page.keyboard.press('Enter');
      await expect
        .poll(() => page.locator('[data-testid="wire-detail"] h2').innerText(), POLL)
        .toContain(`#${firstSeq}`);
      await page.locator('[data-testid="wire-pause"]').click(); // hold the list still for the arrow key
      const secondSeq = await rows.nth(1).getAttribute('data-seq');
      await rows.first().focus();
      await page.keyboard.press('ArrowDown');
      await expect
        .poll(() => page.locator('[data-testid="wire-detail"] h2').innerText(), POLL)
        .toContain(`#${secondSeq}`);
      expect(await rows.nth(1).getAttribute('aria-selected')).toBe('true');
      expect(problems).toEqual([]);
      await page.close();
    });

    // After the overview counted exactly the bots' 20 open connections: this adds one.
    it('a disconnect from the page drops that client (the client sees the close)', {
      concurrent: false,
      timeout: 120_000,
    }, async ({ expect }) => {
      const tcp = serve!.endpoint('nox-relay', 'tcp');
      // The bots are on UDP: this client is the one TCP connection.
      const client = new NoxRelayClient({ host: '127.0.0.1', port: tcp.port, transport: 'tcp' });
      noxClients.push(client);
      await client.connect();
      await client.handshake('node', 'dashboard-test');
      const closed = new Promise<void>((resolve) => client.once('close', () => resolve()));
      const { page, problems } = await open('/nox-relay');
      const row = page
        .locator('[data-testid="connection-row"]')
        .filter({ has: page.locator('td', { hasText: /^tcp$/ }) });
      await expect.poll(() => row.count(), POLL).toBe(1);
      await row.locator('[data-testid="disconnect"]').click();
      expect(await page.locator('[data-testid="confirm-dialog"]').isVisible()).toBe(true);
      await page.locator('[data-testid="confirm-ok"]').click();
      await closed;
      expect(client.isClosed).toBe(true);
      await expect.poll(() => row.count(), POLL).toBe(0);
      // The bots were left alone.
      await expect.poll(() => page.locator('[data-testid="player-row"]').count(), POLL).toBe(20);
      expect(await page.locator('[data-testid="error"]').count()).toBe(0);
      expect(problems).toEqual([]);
      await page.close();
    });
  });

  describe.concurrent('unity-relay', () => {
    describe.concurrent('looking', () => {
      it.concurrent('a Unity Relay chat: its allocations appear with their transport, peers and rising traffic', async ({
        expect,
      }) => {
        const { joinCode, allocationId } = chat!;
        const { page, problems } = await open('/unity-relay');
        const row = `[data-testid="allocation-row"][data-key="${allocationId}"]`;
        await expect.poll(() => page.locator(row).count(), POLL).toBe(1);
        await expect.poll(() => page.locator('[data-testid="allocation-row"]').count(), POLL).toBe(2);
        await expect
          .poll(() => page.locator(`${row} [data-testid="alloc-state"]`).innerText(), POLL)
          .toBe('bound');
        expect(await page.locator(`${row} [data-testid="alloc-transport"]`).innerText()).toBe('udp');
        await expect
          .poll(() => numberAttr(page, `${row} [data-testid="alloc-peers"]`, 'data-value'), POLL)
          .toBe(1);
        const bytesIn = () => numberAttr(page, `${row} [data-testid="alloc-bytes-in"]`, 'data-value');
        await expect.poll(bytesIn, POLL).toBeGreaterThan(0);
        const earlier = await bytesIn();
        await expect.poll(bytesIn, POLL).toBeGreaterThan(earlier);
        expect(await page.locator('[data-testid="join-code-row"]').allInnerTexts()).toEqual(
          expect.arrayContaining([expect.stringContaining(joinCode)]),
        );
        if (SCREENSHOTS) await page.waitForTimeout(6000); // a few more chart points for the picture
        await screenshot(page, 'unity-relay');
        // The overview with both the bots and the chat running.
        await page.goto(`${serve!.adminUrl}/#/`);
        await expect.poll(() => page.locator('[data-testid="server-card"]').count(), POLL).toBe(4);
        if (SCREENSHOTS) await page.waitForTimeout(6000);
        await screenshot(page, 'overview', true);
        expect(problems).toEqual([]);
        await page.close();
      }, 120_000);

      it.concurrent('the wire view shows a chat RELAY just sent, decoded, next to its bytes', async ({
        expect,
      }) => {
        const { page, problems } = await open('/unity-relay/wire');
        await expect
          .poll(() => page.locator('[data-testid="wire-info"]').innerText(), POLL)
          .toContain('kept');
        // The view is armed now: send a line nobody sent before and find it by its bytes.
        const marker = `wire-check-${randomBytes(4).toString('hex')}`;
        const markerHex = Buffer.from(marker).toString('hex');
        const sendUntilSeen = setInterval(() => chat!.say(marker), 500);
        try {
          await page.locator('[data-testid="filter-text"]').fill(markerHex);
          const row = page
            .locator('[data-testid="wire-row"][data-name="RELAY"][data-direction="client"]')
            .first();
          await expect.poll(() => row.count(), POLL).toBe(1);
          await row.click();
          await expect
            .poll(() => page.locator('[data-testid="detail-name"]').innerText(), POLL)
            .toBe('RELAY');
          const tree = await page.locator('[data-testid="field-tree"]').innerText();
          expect(tree).toContain(markerHex);
          const dump = await page.locator('[data-testid="hex-dump"]').innerText();
          expect(dump.replace(/\s+/g, '')).toContain(marker.slice(0, 8)); // the ASCII column
          // Pause holds the list still while messages keep arriving.
          await page.locator('[data-testid="filter-text"]').fill('');
          await page.locator('[data-testid="wire-pause"]').click();
          const frozen = await page.locator('[data-testid="wire-row"]').first().getAttribute('data-seq');
          // Messages keep arriving (a chat line every 200 ms, and the host's echo): once several came
          // in while paused, each of which would have been drawn at the top, the list is still as it was.
          await expect
            .poll(
              async () =>
                Number(
                  /paused: (\d+) new/.exec(
                    await page.locator('[data-testid="wire-info"]').innerText(),
                  )?.[1] ?? 0,
                ),
              POLL,
            )
            .toBeGreaterThanOrEqual(5);
          expect(await page.locator('[data-testid="wire-row"]').first().getAttribute('data-seq')).toBe(
            frozen,
          );
          await page.locator('[data-testid="wire-pause"]').click();
          await expect
            .poll(
              async () =>
                Number(await page.locator('[data-testid="wire-row"]').first().getAttribute('data-seq')),
              POLL,
            )
            .toBeGreaterThan(Number(frozen));
          // Back on the message for the picture.
          await page.locator('[data-testid="filter-text"]').fill(markerHex);
          await page.locator('[data-testid="wire-row"]').first().click();
          await screenshot(page, 'wire');
        } finally {
          clearInterval(sendUntilSeen);
        }
        expect(problems).toEqual([]);
        await page.close();
      }, 120_000);
    });

    // After the pages above looked at the chat's allocation: this ends it.
    it('ending an allocation from the page removes it; cancel does nothing; a refused action shows its error', {
      concurrent: false,
      timeout: 120_000,
    }, async ({ expect }) => {
      const { page, problems } = await open('/unity-relay');
      const row = page.locator(`[data-testid="allocation-row"][data-key="${chat!.allocationId}"]`);
      await expect.poll(() => row.count(), POLL).toBe(1);
      // End it through the page: the host's allocation goes away.
      await row.locator('[data-testid="end-allocation"]').click();
      await page.locator('[data-testid="confirm-ok"]').click();
      await expect.poll(() => row.count(), POLL).toBe(0);
      // Cancel leaves things alone.
      const other = page.locator('[data-testid="allocation-row"]').first();
      if ((await other.count()) === 1) {
        const key = await other.getAttribute('data-key');
        await other.locator('[data-testid="end-allocation"]').click();
        await page.locator('[data-testid="confirm-cancel"]').click();
        await page.waitForTimeout(1500);
        expect(await page.locator(`[data-testid="allocation-row"][data-key="${key}"]`).count()).toBe(1);
      }
      // The server refuses an action on something that is gone: the page says so.
      // (A string, so the test's bundler leaves the browser's import() alone.)
      const path = `/api/servers/unity-relay/allocations/${encodeURIComponent(chat!.allocationId)}/end`;
      await page.evaluate(`import('/assets/actions.js').then(({ actionButton }) => {
        const b = actionButton({ label: 'End', question: 'End it again?', path: ${JSON.stringify(path)}, testid: 'stale-end' });
        document.getElementById('main').prepend(b);
      })`);
      await page.locator('[data-testid="stale-end"]').click();
      await page.locator('[data-testid="confirm-ok"]').click();
      await expect.poll(() => page.locator('[data-testid="error"]').count(), POLL).toBe(1);
      expect(await page.locator('[data-testid="error"]').innerText()).toMatch(/End failed: .+/);
      expect(problems).toEqual([]);
      await page.close();
    });
  });
});
