import fc from 'fast-check';
import { afterAll, describe, expect, test } from 'vitest';
import { readArchiveIndex } from '../../../src/protocols/js5/cache/cache.js';
import { splitTrailer } from '../../../src/protocols/js5/cache/container.js';
import { createMasterIndex, masterIndexContainer } from '../../../src/protocols/js5/cache/master-index.js';
import { openStore } from '../../../src/protocols/js5/cache/store.js';
import { Js5Client, Js5HandshakeError } from '../../../src/protocols/js5/client.js';
import { frameResponse, unframeResponse, xorInPlace } from '../../../src/protocols/js5/framing.js';
import { Js5Request } from '../../../src/protocols/js5/messages.js';
import type { Js5Server } from '../../../src/protocols/js5/server.js';
import { decode } from '../../../src/wire/codec.js';
import { DecodeError } from '../../../src/wire/errors.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { demoCache, RawPeer, startServer } from './helpers.js';

const servers: Js5Server[] = [];
const peers: RawPeer[] = [];
afterAll(async () => {
  for (const p of peers) p.destroy();
  await Promise.all(servers.map((s) => s.close()));
});

async function server(profile: '435' | '530' | 'osrs', extra = {}) {
  const r = await startServer(profile, extra);
  servers.push(r.server);
  return r;
}

async function peer(port: number): Promise<RawPeer> {
  const p = await RawPeer.connect(port);
  peers.push(p);
  return p;
}

function u32(n: number): string {
  return n.toString(16).padStart(8, '0');
}

/** The expected framed response for a stored group, from the demo cache, computed independently of the server. */
function expectedFrame(
  archive: number,
  group: number,
  prefetch = false,
  format: 'original' | 'versioned' = 'versioned',
): Buffer {
  const store = openStore(demoCache());
  const stored =
    archive === 255 && group === 255
      ? masterIndexContainer(createMasterIndex(store, format))
      : store.read(archive, group)!;
  store.close();
  const container = archive === 255 ? stored : splitTrailer(stored).container;
  return frameResponse(archive, group, container, prefetch);
}

describe('requests (OpenRS2 Js5RequestDecoderTest vectors)', () => {
  test.each([
    ['00 02 0003', { type: 'prefetch', archive: 2, group: 3 }],
    ['01 02 0003', { type: 'urgent', archive: 2, group: 3 }],
    ['02 000000', { type: 'loggedIn', value: 0 }],
    ['03 000000', { type: 'loggedOut', value: 0 }],
    ['04 20 0000', { type: 'rekey', key: 0x20 }],
    ['06 000003', { type: 'connected', value: 3 }],
    ['07 000000', { type: 'disconnect', value: 0 }],
  ])('%s', (h, v) => {
    expect(decode(Js5Request, Buffer.from(h.replace(/\s/g, ''), 'hex'))).toEqual(v);
  });

  test('unknown opcode 08000000 and a rekey with a non-zero pad are DecodeErrors', () => {
    expect(() => decode(Js5Request, Buffer.from('08000000', 'hex'))).toThrow(
      expect.objectContaining({ code: 'ERR_UNKNOWN_TYPE' }),
    );
    expect(() => decode(Js5Request, Buffer.from('04200001', 'hex'))).toThrow(
      expect.objectContaining({ code: 'ERR_BAD_MAGIC' }),
    );
  });

  test('arbitrary bytes → only DecodeError; valid requests round-trip', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 8 }), (b) => {
        try {
          const v = decode(Js5Request, b);
          expect(decode(Js5Request, Buffer.from(b))).toEqual(v);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 1000 },
    );
  });
});

describe('handshake', () => {
  test('0 for the right build, 6 for a wrong one (then closed)', async () => {
    const { server: s } = await server('530');
    const ok = await peer(s.port);
    ok.send(`0f${u32(530)}`);
    expect((await ok.waitFor(1))[0]).toBe(0);
    const old = await peer(s.port);
    old.send(`0f${u32(529)}`);
    expect((await old.waitFor(1))[0]).toBe(6);
    expect(await old.waitClosed()).toBe(true);
    await expect(
      Js5Client.connect({ host: '127.0.0.1', port: s.port, build: 1, profile: '530' }),
    ).rejects.toBeInstanceOf(Js5HandshakeError);
  });

  test('7 when the server is full', async () => {
    const { server: s } = await server('530', { maxClients: 1 });
    const a = await peer(s.port);
    a.send(`0f${u32(530)}`);
    expect((await a.waitFor(1))[0]).toBe(0);
    const b = await peer(s.port);
    b.send(`0f${u32(530)}`);
    expect((await b.waitFor(1))[0]).toBe(7);
    expect(await b.waitClosed()).toBe(true);
  });

  test('9 beyond the per-address limit', async () => {
    const { server: s, metrics } = await server('530', { maxPerIp: 1 });
    const a = await peer(s.port);
    a.send(`0f${u32(530)}`);
    expect((await a.waitFor(1))[0]).toBe(0);
    const b = await peer(s.port);
    b.send(`0f${u32(530)}`);
    expect((await b.waitFor(1))[0]).toBe(9);
    expect(await b.waitClosed()).toBe(true);
    expect(metrics.closed.get('ip_limit')).toBe(1);
  });

  test('OSRS ≥ 223 sends a 21-byte handshake; a split handshake works', async () => {
    const { server: s } = await server('osrs', { build: 232 });
    const p = await peer(s.port);
    p.send(`0f${u32(232)}`);
    await elapse(30, 'the first part arrives alone, and no reply may come before the seed');
    expect(p.received.length).toBe(0); // still waiting for the 16-byte seed
    p.send(`${'11'.repeat(16)}01ffff00`.slice(0, 32));
    p.send('01ff00ff');
    const expected = expectedFrame(255, 255);
    const got = await p.waitFor(1 + expected.length);
    expect(got[0]).toBe(0);
    expect(got.subarray(1).equals(expected)).toBe(true);
  });

  test('a login opcode other than 15 closes the connection', async () => {
    const { server: s, metrics } = await server('530');
    const p = await peer(s.port);
    p.send('10000000');
    expect(await p.waitClosed()).toBe(true);
    expect(metrics.closed.get('unknown_opcode')).toBe(1);
  });
});

async function js5Peer(s: Js5Server, build = s.build): Promise<RawPeer> {
  const p = await peer(s.port);
  p.send(`0f${u32(build)}${s.profile.name === 'osrs' && build >= 223 ? '00'.repeat(16) : ''}`);
  await p.waitFor(1);
  p.received = p.received.subarray(1);
  return p;
}

describe('responses', () => {
  test('530: master index is type 0 VERSIONED; 0x80 only on prefetch responses', async () => {
    const { server: s } = await server('530');
    const p = await js5Peer(s);
    p.send('06000003 03000000 01ff00ff');
    const master = expectedFrame(255, 255);
    expect((await p.waitFor(master.length)).equals(master)).toBe(true);
    expect(master[3]).toBe(0);
    const payload = unframeResponse(master, 0, master.length).subarray(8);
    expect(payload.length).toBe(28 * 8); // archives 0..27 (what the 530 client builds), VERSIONED
    p.received = Buffer.alloc(0);
    p.send('00010000'); // prefetch 1/0 (container of 509 bytes)
    const pre = expectedFrame(1, 0, true);
    expect(pre[3]).toBe(0x80);
    expect((await p.waitFor(pre.length)).equals(pre)).toBe(true);
    p.received = Buffer.alloc(0);
    p.send('01010001'); // urgent 1/1 (510 bytes: one marker)
    const urg = expectedFrame(1, 1);
    expect((await p.waitFor(urg.length)).equals(urg)).toBe(true);
    expect(urg.length).toBe(514);
    expect(urg[512]).toBe(0xff);
    p.received = Buffer.alloc(0);
    p.send('00040001'); // prefetch of a large group: sliced, one marker every 512 bytes
    const big = expectedFrame(4, 1, true);
    expect((await p.waitFor(big.length)).equals(big)).toBe(true);
  });

  test.each(['osrs', '435'] as const)(
    '%s: never sets 0x80; 435 gets the ORIGINAL master index',
    async (profile) => {
      const { server: s } = await server(profile);
      const p = await js5Peer(s);
      p.send('01ff00ff');
      const master = expectedFrame(255, 255, false, profile === '435' ? 'original' : 'versioned');
      const got = await p.waitFor(master.length);
      expect(got.equals(master)).toBe(true);
      expect(got.readInt32BE(4)).toBe(profile === '435' ? 28 * 4 : 28 * 8);
      p.received = Buffer.alloc(0);
      p.send('00010000');
      const pre = expectedFrame(1, 0, false);
      expect((await p.waitFor(pre.length)).equals(pre)).toBe(true);
    },
  );

  test('requests split across writes (OpenRS2 testFragmented) and coalesced with the handshake', async () => {
    const { server: s } = await server('530');
    const p = await peer(s.port);
    p.send(`0f${u32(530)}0001`);
    await elapse(20, 'space the writes so that they arrive in separate reads');
    p.send('00');
    await elapse(20, 'space the writes so that they arrive in separate reads');
    p.send('02');
    const f = expectedFrame(1, 2, true);
    const got = await p.waitFor(1 + f.length);
    expect(got[0]).toBe(0);
    expect(got.subarray(1).equals(f)).toBe(true);
  });

  test('rekey: every downstream byte after it is XORed, markers included', async () => {
    const { server: s } = await server('530');
    const p = await js5Peer(s);
    p.send('04200000 01010003'); // key 0x20, urgent 1/3 (1021-byte container: markers at 512, 1024)
    const plain = expectedFrame(1, 3);
    const got = Buffer.from(await p.waitFor(plain.length));
    expect(got[512]).toBe(0xff ^ 0x20);
    expect(got[1024]).toBe(0xff ^ 0x20);
    xorInPlace(got, 0x20);
    expect(got.equals(plain)).toBe(true);
  });

  test('a prefetch upgraded to urgent is answered twice: once with 0x80 (530), once without', async () => {
    const { server: s } = await server('530');
    const p = await js5Peer(s);
    p.send('00040000 00020001 01020001');
    const a = expectedFrame(4, 0, true);
    const pre = expectedFrame(2, 1, true);
    const urg = expectedFrame(2, 1, false);
    const total = a.length + pre.length + urg.length;
    const got = await p.waitFor(total);
    await elapse(100, 'no reply beyond the three may come');
    expect(p.received.length).toBe(total);
    // Urgent first (its own queue), then the prefetches in order.
    expect(got.subarray(0, urg.length).equals(urg)).toBe(true);
    expect(got.subarray(urg.length, urg.length + a.length).equals(a)).toBe(true);
    expect(got.subarray(urg.length + a.length).equals(pre)).toBe(true);
  });
});

describe('preload and the LRU', () => {
  test('--preload frames everything at start and serves without the store; refused beyond its budget', async () => {
    const { server: s } = await server('530', { preload: true });
    const p = await js5Peer(s);
    p.send('01040002');
    const f = expectedFrame(4, 2);
    expect((await p.waitFor(f.length)).equals(f)).toBe(true);
    expect(s.responses.stats.misses).toBe(0);
    await expect(startServer('530', { preload: true, preloadMaxBytes: 100_000 })).rejects.toThrow(
      /preloading needs more/,
    );
  });

  test('the LRU stays within its byte budget', async () => {
    const { server: s } = await server('530', { cacheBytes: 1024 * 1024 });
    const c = await Js5Client.connect({ host: '127.0.0.1', port: s.port, build: 530, profile: '530' });
    for (const g of [0, 1, 2, 3, 4, 5]) await c.request(4, g);
    for (const g of [0, 1, 2, 3]) await c.request(2, g);
    await c.close();
    expect(s.responses.cachedBytes).toBeLessThanOrEqual(1024 * 1024);
    expect(s.responses.stats.evictions + s.responses.stats.misses).toBeGreaterThan(0);
  });
});

describe('malformed input and missing groups', () => {
  test.each([
    ['unknown opcode', '08000000', 'unknown_opcode'],
    ['rekey with a non-zero pad', '04200001', 'malformed'],
    ['out-of-range archive', '01c80000', 'missing_group'],
    ['missing group in a present archive', '0100fff0', 'missing_group'],
    ['index of an absent archive', '01ff00f0', 'missing_group'],
  ])('%s closes the connection', async (_n, h, reason) => {
    // Missing groups close only with --missing-group close (the default, drop, is tested below).
    const { server: s, metrics } = await server('530', { missingGroup: 'close' });
    const p = await js5Peer(s);
    p.send(h);
    expect(await p.waitClosed()).toBe(true);
    expect(metrics.closed.get(reason)).toBe(1);
  });

  test('by default (missingGroup=drop), a missing group is dropped and the connection goes on', async () => {
    const { server: s, metrics } = await server('530');
    expect(s.settings.missingGroup).toBe('drop');
    const p = await js5Peer(s);
    p.send('01c80000 01010000');
    const f = expectedFrame(1, 0);
    expect((await p.waitFor(f.length)).equals(f)).toBe(true);
    expect(p.closed).toBe(false);
    expect(metrics.dropped.get('missing_group')).toBe(1);
  });

  test('the client watchdog fails requests that get no answer (missing group dropped)', async () => {
    const { server: s } = await server('530', { missingGroup: 'drop' });
    const c = await Js5Client.connect({
      host: '127.0.0.1',
      port: s.port,
      build: 530,
      profile: '530',
      idleTimeoutMs: 300,
    });
    await expect(c.request(200, 0, true)).rejects.toThrow(/no response for 300 ms/);
  });

  test('disconnect (07) closes', async () => {
    const { server: s } = await server('530');
    const p = await js5Peer(s);
    p.send('07000000');
    expect(await p.waitClosed()).toBe(true);
  });

  test('arbitrary request streams never crash the server', async () => {
    const { server: s } = await server('osrs', { maxPerIp: 0 });
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 64 }), async (bytes) => {
        const p = await js5Peer(s);
        p.send(Buffer.from(bytes));
        await elapse(5, 'the peer stays a moment, so that the server reads the bytes while it is connected');
        p.destroy();
      }),
      { numRuns: 40 },
    );
    const c = await Js5Client.connect({ host: '127.0.0.1', port: s.port, build: s.build, profile: 'osrs' });
    expect((await c.masterIndex()).entries.length).toBe(28);
    await c.close();
  });
});

describe('scheduling and backpressure', () => {
  test('fairness: while another client floods prefetch for big groups, an urgent request waits at most one slice', async () => {
    const slice = 16 * 1024;
    const { server: s } = await server('530', { sliceBytes: slice });
    const idx = readArchiveIndex(openStore(demoCache()), 4)!;
    const big = idx.groups.map((g) => g.id);
    // The flooder reads everything (so it stays writable) and keeps 20 big prefetches in flight.
    const flooder = await js5Peer(s);
    const req = Buffer.alloc(20 * 4);
    for (let i = 0; i < 20; i++) req.writeUInt32BE((0 << 24) | (4 << 16) | big[i % big.length]!, i * 4);
    flooder.send(req);
    await waitFor(() => s.stats.bytesSent > 0, { what: 'the flooder being served' });
    const before = s.stats.bytesSent;
    const victim = await js5Peer(s);
    const started = Date.now();
    victim.send('01000003');
    const f = expectedFrame(0, 3);
    expect((await victim.waitFor(f.length)).equals(f)).toBe(true);
    const latency = Date.now() - started;
    const during = s.stats.bytesSent - before;
    expect(s.stats.maxUrgentWaitBytes).toBeLessThanOrEqual(slice);
    expect(s.stats.maxUrgentWaitTurns).toBeLessThanOrEqual(1);
    // The flood (20 groups of 150–600 KB) was far from done when the urgent response arrived.
    expect(during).toBeLessThan(20 * 150_000);
    expect(latency).toBeLessThan(2000);
  });

  test('reading pauses at the in-flight caps (20 + 20 for 530)', async () => {
    const { server: s, metrics } = await server('530');
    const p = await js5Peer(s);
    p.socket.pause(); // never read: the server's writes back up
    const req = Buffer.alloc(200 * 4);
    for (let i = 0; i < 200; i++) req.writeUInt32BE((4 << 16) | (i % 6), i * 4);
    p.send(req);
    await waitFor(() => s.stats.maxQueued >= 20, { what: 'the in-flight cap reached' });
    await elapse(200, 'reading must stay paused: no request beyond the caps may be taken meanwhile');
    expect(s.stats.maxQueued).toBeLessThanOrEqual(20);
    expect(metrics.received).toBeLessThan(200);
    p.socket.resume();
    // Reading everything lets the server finish every request.
    const frames = Array.from({ length: 200 }, (_, i) => expectedFrame(4, i % 6, true));
    const total = frames.reduce((a, f) => a + f.length, 0);
    const got = await p.waitFor(total, 20_000);
    expect(got.length).toBe(total);
    expect(got.equals(Buffer.concat(frames))).toBe(true);
    expect(metrics.received).toBe(200);
  });
});
