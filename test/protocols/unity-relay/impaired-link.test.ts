/**
 * Unity Relay games through a lossy, duplicating, reordering path (a user-space proxy: this
 * kernel has no netem; see test/helpers/impaired-link.ts): DTLS handshakes retransmit their
 * flights until they complete, BINDs and CONNECT_REQUESTs are retried as UTP does, and whatever
 * RELAYs arrive are intact (loss is the path's; a changed byte would be the relay's).
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { ImpairedUdpProxy } from '../../helpers/impaired-link.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { freePort } from '../../helpers/redis.js';
import { type Served, startServe } from '../../helpers/serve.js';

let relay: Served;
let api: string;
let dtlsPort = 0;
const proxies: ImpairedUdpProxy[] = [];

beforeAll(async () => {
  dtlsPort = await freePort();
  relay = await startServe([
    'unity-relay',
    '--port',
    '0',
    '--api-port',
    '0',
    '--host',
    '127.0.0.1',
    '--dtls-port',
    String(dtlsPort),
    '--ws-port',
    '0',
    '--wss-port',
    '0',
    '--no-admin',
  ]);
  api = `http://127.0.0.1:${relay.port('http')}`;
});

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await relay?.stop();
});

describe('unity-relay through an impaired path', () => {
  // Both transports at once, each through its own proxy and from its own two addresses (the
  // relay's budgets are per address).
  const from = { dtls: ['127.0.0.8', '127.0.0.9'], udp: ['127.0.0.10', '127.0.0.11'] };
  for (const transport of ['dtls', 'udp'] as const) {
    it.concurrent(`${transport}: every game binds and connects, and every RELAY that arrives is intact`, async ({
      expect,
    }) => {
      const port = transport === 'dtls' ? dtlsPort : relay.port('udp', /Unity Relay/);
      const proxy = await ImpairedUdpProxy.start(
        { host: '127.0.0.1' },
        { host: '127.0.0.1', port },
        { loss: 0.15, duplicate: 0.05, reorder: 0.1, jitterMs: 5, seed: transport === 'dtls' ? 3 : 4 },
      );
      proxies.push(proxy);
      const s = await runProtocolLoad(
        'unity-relay',
        {
          target: { host: '127.0.0.1', port: proxy.port },
          clients: 4,
          durationS: 60,
          from: from[transport],
        },
        // Retries every second, as UTP's connectTimeoutMS: a lost flight costs a second.
        { api: [api], transport, relayRate: 20, relayBytes: 300 },
        { stopWhen: (p) => p.sessions.joined === 4 && (p.counters.relaysReceived ?? 0) >= 200 },
      );
      // The reason first, should a session fail.
      expect(s.errorMessages).toEqual({});
      expect(s.sessions).toMatchObject({ joined: 4, failed: 0 });
      expect(s.violations).toEqual({});
      expect(s.counters.relaysReceived).toBeGreaterThanOrEqual(200);
      // Loss is the path's (15 % each way), duplicates are counted, not delivered twice as new.
      expect(s.derived.relayLossPercent).toBeGreaterThan(0);
      expect(s.derived.relayLossPercent).toBeLessThan(40);
      expect(proxy.stats.dropped).toBeGreaterThan(0);
    }, 90_000);
  }
});
