/**
 * JS5 on the framed TCP seam (src/core/framed-tcp.ts): guarantees the seam brings that the
 * hand-rolled JS5 transport did not have. Each test failed before the move.
 */
import { afterAll, describe, expect, test } from 'vitest';
import type { Js5Server } from '../../../src/protocols/js5/server.js';
import { RawPeer, startServer } from './helpers.js';

const servers: Js5Server[] = [];
const peers: RawPeer[] = [];
afterAll(async () => {
  for (const p of peers) p.destroy();
  await Promise.all(servers.map((s) => s.close()));
});

async function handshaken(s: Js5Server): Promise<RawPeer> {
  const p = await RawPeer.connect(s.port);
  peers.push(p);
  p.send(`0f${s.build.toString(16).padStart(8, '0')}`);
  await p.waitFor(1);
  expect(p.received[0]).toBe(0);
  p.received = p.received.subarray(1);
  return p;
}

describe('js5 on the framed TCP seam', () => {
  test('a request begun must complete within the frame deadline (handshakeTimeoutMs), even with the idle rule off', async () => {
    const { server: s, metrics } = await startServer('530', { handshakeTimeoutMs: 400, idleTimeoutMs: 0 });
    servers.push(s);
    const slow = await handshaken(s);
    const fine = await handshaken(s);
    slow.send('0100'); // two bytes of a four-byte request, then nothing
    expect(await slow.waitClosed(10_000)).toBe(true);
    expect(metrics.closed.get('frame_timeout')).toBe(1);
    // A session that sends whole requests is not affected.
    fine.send('01ff0000');
    expect((await fine.waitFor(8)).length).toBeGreaterThanOrEqual(8);
    expect(fine.closed).toBe(false);
  });

  test('the connections are listed by the transport and can be closed from there', async () => {
    const { server: s, metrics } = await startServer('530');
    servers.push(s);
    const p = await handshaken(s);
    const conns = [...s.transport!.connections()];
    expect(conns).toHaveLength(1);
    conns[0]!.close('closed_by_operator');
    expect(await p.waitClosed()).toBe(true);
    expect(metrics.closed.get('closed_by_operator')).toBe(1);
  });
});
