/**
 * Issue 24 item 4 for rmc: a crowd behind one address logs in, with default limits, on a spawned
 * `gamewire serve rmc`. The players are `gamewire load rmc`'s (gamewire's own client, the classic
 * ladder as the classic titles climb it: auth CONNECT, TicketGranting Login and RequestTicket,
 * the ticket opened with the user key, a Kerberos CONNECT to the secure server, Register; every
 * answer must echo its own call's number).
 *
 * Before: a classic login cost the server ~0.1 s of CPU on its event loop and a player holds two
 * connections while it moves to the secure server, so 64 players behind one address took 5–40 s
 * and part of them were refused (per-address cap 64) or gave up.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Served, spawnServe } from '../../helpers/crowd.js';
import { runProtocolLoad } from '../../helpers/load.js';

let classic: Served;
let hyperscape: Served;

beforeAll(async () => {
  [classic, hyperscape] = await Promise.all([
    spawnServe(['rmc', '--port', '0', '--prudp-profile', 'classic']),
    spawnServe(['rmc', '--port', '0']),
  ]);
}, 90_000);

afterAll(async () => {
  expect(await classic?.stop()).toBe(0);
  expect(await hyperscape?.stop()).toBe(0);
}, 30_000);

const dropped = (s: Served, reason: string) =>
  s.metric('gamewire_dropped_total', { protocol: 'rmc', reason });

/** 64 players from `address`, all arriving at once, each calling 4 times a second once in. */
async function crowd(s: Served, address: string, options: Record<string, unknown>) {
  return runProtocolLoad(
    'rmc',
    {
      target: { host: '127.0.0.1', port: s.port('rmc', 'udp') },
      clients: 64,
      arrivalRate: 0,
      durationS: 40,
      from: [address],
    },
    { callRate: 4, ...options },
    // Ends once everyone is in and the calls have gone around a few times.
    { stopWhen: (p) => p.sessions.joined === 64 && (p.counters.answered ?? 0) >= 64 * 3, graceMs: 10_000 },
  );
}

describe('issue 24 item 4: rmc, a crowd behind one address (default limits)', () => {
  it('64 classic players behind one address climb the Kerberos ladder over PRUDP at once: all get in, every call answered', async () => {
    const s = await crowd(classic, '127.0.0.90', { prudpProfile: 'classic' });
    console.log(
      JSON.stringify({
        crowd: 'classic prudp',
        joinMs: s.latencyMs.join,
        callMs: s.latencyMs.call,
        answered: s.counters.answered,
      }),
    );
    expect(s.sessions).toMatchObject({ started: 64, joined: 64, failed: 0 });
    expect(s.errors).toEqual({});
    expect(s.violations).toEqual({});
    expect(s.counters.logins).toBe(64);
    expect(s.counters.answered).toBeGreaterThanOrEqual(64 * 3);
    // Everyone in within 15 s on the shared, loaded 2-core machine (measured: about 1-3 s; the
    // issue's "within one second" holds on a quiet one). Before: 5-40 s, some never.
    expect(s.latencyMs.join!.max).toBeLessThan(15_000);
    expect(await dropped(classic, 'prudp_per_ip_limit')).toBe(0);
    expect(await dropped(classic, 'prudp_connection_limit')).toBe(0);
  }, 90_000);

  it('64 players over TCP and 64 over PRUDP (ECDH) behind one address, default profile: all get in', async () => {
    const [tcp, prudp] = await Promise.all([
      crowd(hyperscape, '127.0.0.91', { transport: 'tcp' }),
      crowd(hyperscape, '127.0.0.91', { transport: 'prudp' }),
    ]);
    console.log(
      JSON.stringify({
        crowd: 'hyperscape tcp + prudp',
        tcpJoinMs: tcp.latencyMs.join,
        prudpJoinMs: prudp.latencyMs.join,
      }),
    );
    for (const s of [tcp, prudp]) {
      expect(s.sessions).toMatchObject({ started: 64, joined: 64, failed: 0 });
      expect(s.errors).toEqual({});
      expect(s.violations).toEqual({});
      expect(s.counters.answered).toBeGreaterThanOrEqual(64 * 3);
      expect(s.latencyMs.join!.max).toBeLessThan(15_000);
    }
    expect(
      await hyperscape.metric('gamewire_connections_closed_total', {
        protocol: 'rmc',
        reason: 'per_ip_limit',
      }),
    ).toBe(0);
    expect(await dropped(hyperscape, 'prudp_per_ip_limit')).toBe(0);
  }, 90_000);
});
