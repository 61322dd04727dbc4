/**
 * `gamewire load unity-relay` against a spawned `serve unity-relay`: games allocate, get a join
 * code, join, bind over every transport and relay both ways; every byte of every RELAY is
 * checked. The fleet case (allocators on Redis, players sent to the node each allocation names)
 * is in fleet-load.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProtocolLoad } from '../../helpers/load.js';
import { freePort } from '../../helpers/redis.js';
import { type Served, startServe } from '../../helpers/serve.js';

let relay: Served;
let api: string;
const ports = { udp: 0, dtls: 0, ws: 0, wss: 0 };

beforeAll(async () => {
  ports.dtls = await freePort();
  ports.ws = await freePort();
  ports.wss = await freePort();
  relay = await startServe([
    'unity-relay',
    '--port',
    '0',
    '--api-port',
    '0',
    '--host',
    '127.0.0.1',
    '--dtls-port',
    String(ports.dtls),
    '--ws-port',
    String(ports.ws),
    '--wss-port',
    String(ports.wss),
    '--no-admin',
  ]);
  ports.udp = relay.port('udp', /Unity Relay/);
  api = `http://127.0.0.1:${relay.port('http')}`;
});

afterAll(async () => {
  await relay?.stop();
});

// The loads run at once, each from addresses of its own: the API's and the relay's budgets are
// per client address.
describe.concurrent('load unity-relay', () => {
  const from = { udp: '127.0.0.20', dtls: '127.0.0.21', ws: '127.0.0.22', wss: '127.0.0.23' };
  for (const transport of ['udp', 'dtls', 'ws', 'wss'] as const) {
    it(`host/join pairs bind over ${transport} and relay both ways, every byte checked`, async ({
      expect,
    }) => {
      const s = await runProtocolLoad(
        'unity-relay',
        {
          target: { host: '127.0.0.1', port: ports[transport] },
          clients: 3,
          durationS: 2,
          from: [from[transport]],
        },
        { api: [api], transport, relayRate: 20, relayBytes: 200, insecure: true },
      );
      expect(s.sessions).toMatchObject({ started: 3, joined: 3, failed: 0 });
      expect(s.violations).toEqual({});
      expect(s.counters.relaysReceived).toBeGreaterThan(0);
      expect(s.latencyMs.relay?.count).toBe(s.counters.relaysReceived);
      expect(s.latencyMs.join?.count).toBe(3);
      expect(s.ok).toBe(true);
    });
  }
});

// After the loads above, not among them: how many RELAYs games of four exchange in their 2 s
// depends on how soon they join, which a loaded machine delays.
describe('load unity-relay, games of four', () => {
  it('games of four take the relay endpoint from each allocation and spread over addresses', async () => {
    const s = await runProtocolLoad(
      'unity-relay',
      { clients: 2, durationS: 2, from: ['127.0.0.5', '127.0.0.6', '127.0.0.7'] },
      { api: [api], players: 4 },
    );
    expect(s.sessions).toMatchObject({ joined: 2, failed: 0 });
    expect(s.violations).toEqual({});
    // Host to three joiners and three joiners to the host: six streams per game.
    expect(s.counters.relaysReceived).toBeGreaterThan(12);
  });

  it('refuses an API outside loopback unless the target is owned', async () => {
    const err = await runProtocolLoad(
      'unity-relay',
      { clients: 1 },
      { api: ['http://192.0.2.1:37080'] },
    ).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_LOAD_TARGET' });
  });
});
