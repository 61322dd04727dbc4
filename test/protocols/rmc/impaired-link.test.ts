/**
 * RMC over PRUDP through a lossy, duplicating, reordering, delaying path (a user-space proxy:
 * this kernel has no netem; see test/helpers/impaired-link.ts): PRUDP retransmission and its
 * in-order delivery must keep every session correct. Every call is answered exactly once with
 * its own number, none is lost: a call the server ran twice would show as an answer matching no
 * call (the second answer travels as reliably as the first).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImpairedUdpProxy } from '../../helpers/impaired-link.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

const PATH = { loss: 0.1, duplicate: 0.05, reorder: 0.1, delayMs: 2, jitterMs: 8 };

let hyperscape: Served;
let classic: Served;
const proxies: ImpairedUdpProxy[] = [];

beforeAll(async () => {
  [hyperscape, classic] = await Promise.all([
    startServe(['rmc', '--port', '0', '--host', '127.0.0.1', '--no-admin', '--rmc-transport', 'prudp']),
    // The classic login names the secure server by its StationURL: public host 127.0.0.2, where
    // the proxy listens on the server's own port, so the secure connection crosses it too.
    startServe([
      'rmc',
      '--port',
      '0',
      '--host',
      '127.0.0.1',
      '--no-admin',
      '--rmc-transport',
      'prudp',
      '--prudp-profile',
      'classic',
      '--prudp-public-host',
      '127.0.0.2',
    ]),
  ]);
});

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all([hyperscape?.stop(), classic?.stop()]);
});

// The two runs use their own server, proxy and client addresses: they go at once.
describe.concurrent('rmc through an impaired path', () => {
  it('HyperScape players over PRUDP: every call answered once, none lost', async () => {
    const proxy = await ImpairedUdpProxy.start(
      { host: '127.0.0.1' },
      { host: '127.0.0.1', port: hyperscape.port('udp') },
      { ...PATH, seed: 7 },
    );
    proxies.push(proxy);
    const s = await runProtocolLoad(
      'rmc',
      {
        target: { host: '127.0.0.1', port: proxy.port },
        clients: 4,
        durationS: 50,
        from: ['127.0.0.3', '127.0.0.4'],
      },
      { callRate: 20 },
      // Under 10 % loss a login takes a few retransmissions: the run ends once 200 calls went out.
      { stopWhen: (p) => p.sessions.joined === 4 && (p.counters.calls ?? 0) >= 200 },
    );
    // The reason first, should a session fail.
    expect(s.errorMessages).toEqual({});
    expect(s.sessions).toMatchObject({ joined: 4, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.calls).toBeGreaterThanOrEqual(200);
    expect(s.counters.answered).toBe(s.counters.calls);
    // The path really was bad.
    expect(proxy.stats.dropped).toBeGreaterThan(10);
    expect(proxy.stats.duplicated).toBeGreaterThan(5);
    expect(proxy.stats.reordered).toBeGreaterThan(10);
  }, 60_000);

  it('classic players: Kerberos login, ticket and secure connection through the same path', async () => {
    const port = classic.port('udp');
    const proxy = await ImpairedUdpProxy.start(
      { host: '127.0.0.2', port },
      { host: '127.0.0.1', port },
      { ...PATH, seed: 11 },
    );
    proxies.push(proxy);
    const s = await runProtocolLoad(
      'rmc',
      { target: { host: '127.0.0.2', port }, clients: 2, durationS: 45 },
      { prudpProfile: 'classic', callRate: 10 },
      { stopWhen: (p) => p.sessions.joined === 2 && (p.rates.answered ?? 0) > 0 },
    );
    // The reason first, should a session fail.
    expect(s.errorMessages).toEqual({});
    expect(s.sessions).toMatchObject({ joined: 2, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.answered).toBe(s.counters.calls);
    // Auth and secure connections: two client sources per player crossed the proxy.
    expect(proxy.stats.clients).toBeGreaterThanOrEqual(4);
  }, 90_000);
});
