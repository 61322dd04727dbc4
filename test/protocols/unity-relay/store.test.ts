/** AllocationStore with a fake clock: lifetimes, tombstones, join codes, connection data. */
import { describe, expect, it } from 'vitest';
import {
  AllocationStore,
  describeConnectionData,
  nonceIsNewer,
} from '../../../src/protocols/unity-relay/index.js';

function clocked(options: ConstructorParameters<typeof AllocationStore>[0] = {}) {
  let t = 1_000_000;
  const store = new AllocationStore({ ...options, now: () => t });
  return { store, advance: (ms: number) => (t += ms) };
}

describe('AllocationStore', () => {
  it('finds allocations by their 16 id bytes in place, and only exact matches', () => {
    const { store } = clocked();
    const a = store.allocateHost(2, 'local-1');
    const buf = Buffer.concat([Buffer.alloc(5), a.id, Buffer.alloc(3)]);
    expect(store.find(buf, 5)).toBe(a);
    const other = Buffer.from(a.id);
    other[15] ^= 1;
    expect(store.find(other, 0)).toBeUndefined();
    expect(store.byGuid(a.guid)).toBe(a);
  });

  it('verifies its own connection data and rejects tampered or foreign data', () => {
    const { store } = clocked();
    const a = store.allocateHost(7, 'local-1');
    expect(store.verifyConnectionData(a.connectionData, 0)?.equals(a.id)).toBe(true);
    expect(describeConnectionData(a.connectionData)).toMatchObject({ role: 0, maxConnections: 7 });
    const tampered = Buffer.from(a.connectionData);
    tampered[40] ^= 1;
    expect(store.verifyConnectionData(tampered, 0)).toBeUndefined();
    const foreign = new AllocationStore();
    expect(foreign.verifyConnectionData(a.connectionData, 0)).toBeUndefined();
  });

  it('expires unbound, idle and lone-host allocations at their own limits, then forgets tombstones', () => {
    const { store, advance } = clocked({
      idleTimeoutMs: 100,
      hostAloneTimeoutMs: 300,
      bindTimeoutMs: 50,
      tombstoneMs: 1000,
    });
    const never = store.allocateHost(1, 'local-1');
    const lone = store.allocateHost(1, 'local-1');
    const host = store.allocateHost(1, 'local-1');
    const client = store.join(store.joinCodeFor(host).code)!;
    store.bind(lone, '1.1.1.1', 1, 0);
    store.bind(host, '1.1.1.2', 1, 0);
    store.bind(client, '1.1.1.3', 1, 0);
    store.link(host, client);
    const expired: string[] = [];
    const sweep = () => store.sweep((a, peers) => expired.push(`${a.guid}:${peers.length}`));
    advance(60);
    sweep();
    expect(expired).toEqual([`${never.guid}:0`]);
    advance(60); // 120 ms: host and client idle past 100 ms
    sweep();
    expect(expired).toHaveLength(3);
    expect(expired).toContain(`${host.guid}:1`);
    expect(lone.state).toBe('bound');
    advance(200); // 320 ms: the lone host too
    sweep();
    expect(lone.state).toBe('expired');
    expect(store.size).toBe(4); // tombstones
    advance(1000);
    sweep();
    expect(store.size).toBe(0);
  });

  it('a tombstone keeps the id and nothing secret: no key, no connection data, no host, no peers', () => {
    const { store, advance } = clocked({ idleTimeoutMs: 100, tombstoneMs: 1000 });
    const host = store.allocateHost(1, 'local-1');
    const client = store.join(store.joinCodeFor(host).code)!;
    store.bind(host, '1.1.1.2', 1, 0);
    store.bind(client, '1.1.1.3', 1, 0);
    store.link(host, client);
    advance(120);
    store.sweep(() => {});
    for (const a of [host, client]) {
      const kept = store.find(a.id, 0)!;
      expect(kept.state).toBe('expired');
      expect(kept.id.equals(a.id)).toBe(true);
      expect(kept.guid).toBe(a.guid);
      expect(store.byGuid(a.guid)).toBe(kept);
      expect(kept.key.length).toBe(0);
      expect(kept.connectionData.length).toBe(0);
      expect(kept.host).toBeUndefined();
      expect(kept.peers.size).toBe(0);
      // Its id is a buffer of its own: it holds no shared pool alive.
      expect(kept.id.buffer.byteLength).toBe(16);
    }
    expect([...store.live()]).toEqual([]);
  });

  it('join codes expire, and die with their host', () => {
    const { store, advance } = clocked({ joinCodeTtlMs: 100 });
    const host = store.allocateHost(4, 'local-1');
    const code = store.joinCodeFor(host).code;
    expect(store.joinCodeFor(host).code).toBe(code);
    expect(store.join(code.toLowerCase())).toBeDefined();
    advance(100);
    expect(store.join(code)).toBeUndefined();
    const again = store.joinCodeFor(host).code;
    store.expire(host);
    expect(store.join(again)).toBeUndefined();
  });

  it('unbind (CLOSE) returns an allocation to allocated, drops its links, and restarts the bind timeout', () => {
    const { store, advance } = clocked({ idleTimeoutMs: 100, bindTimeoutMs: 500 });
    const host = store.allocateHost(2, 'local-1');
    const client = store.join(store.joinCodeFor(host).code)!;
    store.bind(host, '1.1.1.1', 1, 7);
    store.bind(client, '1.1.1.2', 1, 0);
    store.link(host, client);
    const expired: string[] = [];
    const sweep = () => store.sweep((a) => expired.push(a.guid));
    // Keep both bound well past the bind timeout counted from creation.
    for (let i = 0; i < 10; i++) {
      advance(90);
      host.lastSeen = client.lastSeen = 1_000_000 + (i + 1) * 90;
      sweep();
    }
    expect(expired).toEqual([]);
    expect(store.unbind(host).map((p) => p.guid)).toEqual([client.guid]);
    expect(host).toMatchObject({ state: 'allocated', address: '', port: 0, nonce: 7 });
    expect(host.peers.size).toBe(0);
    expect(client.peers.size).toBe(0);
    expect(store.lookupJoinCode(host.joinCode!)).toBeDefined(); // still a live host
    advance(499);
    client.lastSeen = host.lastSeen + 499;
    sweep(); // 900 ms after creation, but only 499 ms after the CLOSE
    expect(host.state).toBe('allocated');
    advance(1);
    client.lastSeen += 1;
    sweep();
    expect(host.state).toBe('expired');
    expect(expired).toEqual([host.guid]);
  });

  it('nonceIsNewer: RFC 1982 serial-number order over u16', () => {
    expect(nonceIsNewer(0, -1)).toBe(true);
    expect(nonceIsNewer(0xffff, -1)).toBe(true);
    expect(nonceIsNewer(1, 0)).toBe(true);
    expect(nonceIsNewer(0, 0)).toBe(false);
    expect(nonceIsNewer(0, 1)).toBe(false);
    expect(nonceIsNewer(0, 0xffff)).toBe(true); // the wrap
    expect(nonceIsNewer(5, 0xfff0)).toBe(true);
    expect(nonceIsNewer(0xffff, 0)).toBe(false);
    expect(nonceIsNewer(0x7fff, 0)).toBe(true);
    expect(nonceIsNewer(0x8000, 0)).toBe(false); // exactly half: undefined in RFC 1982, refused
    expect(nonceIsNewer(0x8001, 0)).toBe(false);
    // store.bind keeps the newest in that order.
    const { store } = clocked();
    const a = store.allocateHost(1, 'local-1');
    store.bind(a, '1.1.1.1', 1, 0xfffe);
    store.bind(a, '1.1.1.1', 1, 2);
    expect(a.nonce).toBe(2);
    store.bind(a, '1.1.1.1', 1, 0xffff);
    expect(a.nonce).toBe(2);
  });
});
