/**
 * Issue 24 item 5 for js5: a crowd behind one address against attackers on many, on a spawned
 * `gamewire serve js5` with default limits (the 530 demo cache). Loopback, bounded; the bounds are
 * stated in docs/security.md.
 *
 * - 64 clients behind 127.0.0.84 download the whole cache as the 530 client does (four refusals
 *   in a row and it gives up).
 * - Meanwhile, for 8 s, 1000 attacker addresses (127.1.x.y, in a process of their own) hold two
 *   connections each with half a handshake (2000: past `maxHandshaking`), send junk every second
 *   (an unknown opcode, new connection each time), and 100 of them handshake and flood prefetch
 *   requests for every index without reading.
 * - New clients from another address keep arriving and downloading.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attackerAddresses, flood, type Served, spawnServe } from '../../helpers/crowd.js';
import { runProtocolLoad } from '../../helpers/load.js';

let served: Served;
beforeAll(async () => {
  served = await spawnServe(['js5', '--port', '0']);
});
afterAll(async () => {
  expect(await served.stop()).toBe(0);
}, 30_000);

/** The handshake (15, build 530) then a prefetch request for each of the 28 indexes. */
const prefetchFlood = [
  '0f00000212',
  ...Array.from({ length: 28 }, (_, i) => `00ff00${i.toString(16).padStart(2, '0')}`),
].join('');

describe('issue 24 item 5: js5, a crowd behind one address versus attackers on many', () => {
  it('64 downloaders behind one address and newcomers finish while 1000 addresses attack', async () => {
    const target = { host: '127.0.0.1', port: served.port('js5', 'tcp') };
    const crowd = runProtocolLoad(
      'js5',
      { target, clients: 64, arrivalRate: 0, durationS: 120, from: ['127.0.0.84'] },
      { maxErrors: 4, urgentRate: 2 },
    );
    const attack = flood({
      tcpPort: target.port,
      addresses: attackerAddresses(1000),
      durationMs: 8000,
      intervalMs: 1000,
      tcpHolds: [
        { hex: '0f', perAddress: 2 },
        { hex: prefetchFlood, addresses: 100 },
      ],
      tcpChurn: 'ff000000',
    });
    // Newcomers from another address during the attack: 8 arriving two a second.
    const newcomers = runProtocolLoad(
      'js5',
      { target, clients: 8, arrivalRate: 2, durationS: 120, from: ['127.0.0.85'] },
      { maxErrors: 4, urgentRate: 2 },
    );
    const [c, a, n] = await Promise.all([crowd, attack, newcomers]);
    const closed = async (reason: string) =>
      served.metric('gamewire_connections_closed_total', { protocol: 'js5', reason });
    const report = {
      crowd: { ...c.sessions, errors: c.errors, downloadMs: c.latencyMs.download, elapsedS: c.elapsedS },
      newcomers: { ...n.sessions, errors: n.errors, downloadMs: n.latencyMs.download },
      attack: { ...a, perAddress: undefined },
      evicted: await closed('evicted'),
      unknownOpcode: await closed('unknown_opcode'),
    };
    console.log(JSON.stringify(report));
    // Every player got the whole cache, CRC-checked; nobody was refused.
    expect(c.sessions).toMatchObject({ started: 64, succeeded: 64, failed: 0 });
    expect(n.sessions).toMatchObject({ started: 8, succeeded: 8, failed: 0 });
    for (const s of [c, n]) {
      expect(s.violations).toEqual({});
      expect(s.errors.ERR_JS5_IP_LIMIT).toBeUndefined();
      expect(s.errors.ERR_JS5_FULL).toBeUndefined();
    }
    // Served within a bound: every download done in under 90 s (about 20 s on the loaded test
    // machine, 0.4 s each without the attack on a quiet one).
    expect(c.latencyMs.download!.max).toBeLessThan(90_000);
    expect(n.latencyMs.download!.max).toBeLessThan(90_000);
    // The attack was what it says: half handshakes past the cap were evicted, junk was closed.
    expect(a.tcpConnected).toBeGreaterThanOrEqual(1800);
    expect(report.evicted).toBeGreaterThan(0);
    expect(report.unknownOpcode).toBeGreaterThan(0);
  }, 150_000);
});
