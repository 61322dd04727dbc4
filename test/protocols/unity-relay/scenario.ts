/**
 * The "Done when" list, as one scripted run of Unity Transport 2.x-like clients
 * (./utp.ts) against any relay + allocation API: used in-process and against the real
 * `gamewire serve unity-relay` command.
 */
import { expect } from 'vitest';
import { type AllocationJson, UtpDriver, utpBind, utpConnectRequest, utpHandshake, utpPing } from './utp.js';

async function post(api: string, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${api}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const errorCode = (b: Buffer | undefined) =>
  b !== undefined && b.length === 21 && b[3] === 12 ? b[20] : undefined;

export async function unityTransportScenario(api: string): Promise<void> {
  const drivers: UtpDriver[] = [];
  try {
    // Allocate, get a join code, join (twice) over HTTP.
    const hostRes = await post(api, '/v1/allocate', { maxConnections: 4 });
    expect(hostRes.status).toBe(201);
    const hostAlloc: AllocationJson = hostRes.json.data.allocation;
    const code = await post(api, '/v1/joincode', { allocationId: hostAlloc.allocationId });
    expect(code.status).toBe(201);
    const joins: AllocationJson[] = [];
    for (let i = 0; i < 3; i++) {
      const j = await post(api, '/v1/join', { joinCode: code.json.data.joinCode });
      expect(j.status).toBe(200);
      joins.push(j.json.data.allocation);
    }

    // Bind a host and two clients (BIND every retry period, nonce + 1 after each).
    const host = await UtpDriver.create(hostAlloc);
    const c1 = await UtpDriver.create(joins[0]!);
    const c2 = await UtpDriver.create(joins[1]!);
    const unbound = await UtpDriver.create(joins[2]!);
    drivers.push(host, c1, c2, unbound);
    for (const d of [host, c1, c2]) expect(await d.bind()).toBe(true);

    // A bad HMAC: no reply at all.
    const bad = utpBind(unbound.nonce, unbound.connectionData, unbound.key);
    bad[263] ^= 0xff;
    unbound.peer.send(bad);
    expect(await unbound.peer.next(() => true, 300)).toBeUndefined();

    // Connect: ACCEPTED with From = host.
    for (const c of [c1, c2]) {
      const accepted = await c.connect();
      expect(accepted?.length).toBe(36);
      expect(c.hostId?.equals(host.id)).toBe(true);
      // UTP handshake inside RELAY; the host learns of the client from it.
      c.relay(host.id, utpHandshake(1, c.token));
      expect((await host.peer.nextOfType(10))?.subarray(38).equals(utpHandshake(1, c.token))).toBe(true);
      host.relay(c.id, utpHandshake(2, c.token));
      expect(await c.peer.nextOfType(10)).toBeDefined();
    }

    // Relay both ways at 1, 100 and 1362 bytes.
    for (const size of [1, 100, 1362]) {
      for (const c of [c1, c2]) {
        const up = c.relay(host.id, Buffer.alloc(size, 1));
        expect((await host.peer.nextOfType(10))?.equals(up)).toBe(true);
        const down = host.relay(c.id, Buffer.alloc(size, 2));
        expect((await c.peer.nextOfType(10))?.equals(down)).toBe(true);
      }
    }

    // Ping.
    for (const d of [host, c1, c2]) {
      const ping = utpPing(d.id);
      d.peer.send(ping);
      expect((await d.peer.nextOfType(2))?.equals(ping)).toBe(true);
    }

    // ERROR codes: self-connect 6, unbound sender 3, unconnected pair 5.
    host.peer.send(utpConnectRequest(host.id, host.connectionData));
    expect(errorCode(await host.peer.nextOfType(12))).toBe(6);
    unbound.relay(host.id, Buffer.from('x'));
    expect(errorCode(await unbound.peer.nextOfType(12))).toBe(3);
    c1.relay(c2.id, Buffer.from('x'));
    expect(errorCode(await c1.peer.nextOfType(12))).toBe(5);
  } finally {
    await Promise.all(drivers.map((d) => d.close()));
  }
}
