/**
 * PRUDP peers on the connection seam: the `gamewire:connection:*` events for open and close
 * (with reasons and counters), refusals at the caps, half-open peers that never become
 * connections, and the per-address cap keyed by the address key (two IPv6 addresses in one /64
 * share it), the last in a network namespace whose loopback holds those addresses.
 */
import dgram from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { accessKeyByte, Flag, PacketType, RmcClient, writePacket } from '../../../src/protocols/rmc/index.js';
import { WireWriter } from '../../../src/wire/index.js';
import { watchConnections } from '../../helpers/connection-events.js';
import { canUnshare, runInNetns } from '../../helpers/netns.js';
import { waitFor } from '../../helpers/wait.js';
import { EchoProtocol, type PrudpFixture, startPrudp } from './prudp-helpers.js';

const KEY = 'yl4NG7qZ';
let cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function fixture(options: Parameters<typeof startPrudp>[0] = {}): Promise<PrudpFixture> {
  const f = await startPrudp(options);
  cleanup.push(() => f.close());
  return f;
}

async function client(port: number, extra: Partial<Parameters<typeof RmcClient.connect>[0]> = {}) {
  const c = await RmcClient.connect({
    host: '127.0.0.1',
    port,
    transport: 'prudp',
    accessKey: KEY,
    timeoutMs: 20_000,
    ...extra,
  });
  cleanup.push(() => c.close());
  return c;
}

function syn(): Buffer {
  const w = new WireWriter();
  writePacket(
    w,
    {
      source: 0x3f,
      destination: 0x31,
      type: PacketType.SYN,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
      connectionSignature: 0,
    },
    undefined,
    { width: 1, keyByte: accessKeyByte(KEY) },
  );
  return w.toBuffer();
}

describe('PRUDP on the connection seam', () => {
  it('open, then close with the reason and the counters: peer_disconnect, server_closing', async () => {
    const watch = watchConnections('rmc');
    cleanup.push(() => watch.stop());
    const f = await fixture();
    const leaving = await client(f.port, { prudp: { pingIntervalMs: 200 } });
    const open = await watch.next('open', (e) => e.transport === 'prudp', 'the first PRUDP connection');
    expect(open).toMatchObject({ transport: 'prudp', addressKey: '127.0.0.1' });
    await leaving.call(EchoProtocol, 'Echo', { data: Buffer.from('y') });
    await leaving.close();
    const left = await watch.next('close', (e) => e.transport === 'prudp', 'the client leaving');
    expect(left.reason).toBe('peer_disconnect');
    expect(left.remote).toBe(open.remote);
    // SYN, CONNECT, DATA, DISCONNECT (+ acks) in, counted per packet; the answer went out as DATA.
    expect(left.messagesIn).toBeGreaterThanOrEqual(4);
    expect(left.messagesOut).toBeGreaterThanOrEqual(3);
    expect(left.bytesIn).toBeGreaterThan(0);
    expect(left.bytesOut).toBeGreaterThan(0);

    await client(f.port, { prudp: { pingIntervalMs: 200 } });
    await waitFor(() => f.prudp.table.size === 1, { what: 'the second connection' });
    await f.prudp.close();
    expect(
      (await watch.next('close', (e) => e.reason === 'server_closing', 'the server closing')).transport,
    ).toBe('prudp');
    expect(watch.of('open', 'prudp')).toHaveLength(2);
  });

  it('a silent PRUDP connection closes as idle_timeout', async () => {
    const watch = watchConnections('rmc');
    cleanup.push(() => watch.stop());
    const f = await fixture({ idleTimeoutMs: 300 });
    await client(f.port, { prudp: { pingIntervalMs: 0 } });
    const closed = await watch.next('close', (e) => e.transport === 'prudp', 'the idle close');
    expect(closed.reason).toBe('idle_timeout');
  });

  it('refusals at the per-address cap are drop events; a SYN never completed publishes nothing', async () => {
    const watch = watchConnections('rmc');
    cleanup.push(() => watch.stop());
    const f = await fixture({ maxConnectionsPerIp: 1, halfOpenTimeoutMs: 200 });
    const s = dgram.createSocket('udp4');
    cleanup.push(() => new Promise<void>((r) => s.close(() => r())));
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    s.send(syn(), f.port, '127.0.0.1');
    await waitFor(() => f.prudp.halfOpenConnections === 1, { what: 'the half-open peer' });
    // The half-open peer holds 127.0.0.1's one place: a second source from it is refused.
    const t = dgram.createSocket('udp4');
    cleanup.push(() => new Promise<void>((r) => t.close(() => r())));
    await new Promise<void>((r) => t.bind(0, '127.0.0.1', () => r()));
    t.send(syn(), f.port, '127.0.0.1');
    const drop = await watch.next('drop', () => true, 'the refused SYN');
    expect(drop).toMatchObject({ transport: 'prudp', reason: 'per_ip_limit', addressKey: '127.0.0.1' });
    // Another address is not limited by it.
    const u = dgram.createSocket('udp4');
    cleanup.push(() => new Promise<void>((r) => u.close(() => r())));
    await new Promise<void>((r) => u.bind(0, '127.0.0.2', () => r()));
    u.send(syn(), f.port, '127.0.0.1');
    await waitFor(() => f.prudp.halfOpenConnections === 2, { what: 'the peer from 127.0.0.2' });
    await waitFor(() => f.prudp.halfOpenConnections === 0, { what: 'the half-open peers expiring' });
    expect(f.metrics.counters.get('prudp_half_open_expired')).toBe(2);
    expect(watch.of('open')).toHaveLength(0);
    expect(watch.of('close')).toHaveLength(0);
    expect(f.prudp.table.size).toBe(0);
  });

  it('an RMC connection stands on its transport connection the same way over TCP and PRUDP', async () => {
    const f = await fixture();
    const tcp = await f.rmc.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => tcp.close());
    const overTcp = await client(tcp.port, { transport: 'tcp' });
    const overPrudp = await client(f.port);
    for (const c of [overTcp, overPrudp]) await c.call(EchoProtocol, 'Echo', { data: Buffer.from('seam') });
    const seen = [...f.rmc.dispatcher.liveConnections()].map((c) => ({
      transport: c.transport,
      peerTransport: c.peer.transport,
      addressKey: c.peer.addressKey,
      address: c.remoteAddress === c.peer.remoteAddress && c.remotePort === c.peer.remotePort,
      open: c.peer.open,
      talked: c.peer.messagesIn > 0 && c.peer.messagesOut > 0 && c.peer.bytesIn > 0,
    }));
    const same = { addressKey: '127.0.0.1', address: true, open: true, talked: true };
    expect(seen.sort((a, b) => a.transport.localeCompare(b.transport))).toEqual([
      { transport: 'prudp', peerTransport: 'prudp', ...same },
      { transport: 'tcp', peerTransport: 'tcp', ...same },
    ]);
  });

  it('two IPv6 addresses in one /64 share the per-address cap; another /64 does not', (ctx) => {
    if (!canUnshare()) {
      ctx.annotate('unshare -rn is not allowed here: the IPv6 /64 cap was not checked');
      return;
    }
    const sources = ['2001:db8:1:2::a', '2001:db8:1:2::b', '2001:db8:1:2:ffff::c', '2001:db8:1:3::d'];
    const r = runInNetns<{
      answered: Record<string, boolean | null>;
      perIpDrops: number;
      perAddress: object;
    }>('test/protocols/rmc/prudp-v6-cap.mjs', sources, { sources, maxConnectionsPerIp: 2 });
    expect(r.answered).toEqual({
      '2001:db8:1:2::a': true,
      '2001:db8:1:2::b': true,
      '2001:db8:1:2:ffff::c': false,
      '2001:db8:1:3::d': true,
    });
    expect(r.perIpDrops).toBe(1);
    expect(r.perAddress).toEqual({ '2001:db8:1:2::/64': 2, '2001:db8:1:3::/64': 1 });
  });
});
