/** AllocationStore with a fake clock: lifetimes, tombstones, join codes, connection data. */
import { describe, expect, it } from 'vitest';
import { AllocationStore, describeConnectionData } from '../../../src/protocols/unity-relay/index.js';

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
});
