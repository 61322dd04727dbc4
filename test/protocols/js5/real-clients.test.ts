/**
 * What the real 435, 530 and OSRS clients need from the server (upgraded prefetches, missing
 * groups, the demo layout) and what operators see in the logs. Bytes from the issue reports.
 */

import path from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, describe, expect, test } from 'vitest';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { CacheWriter, readArchiveIndex } from '../../../src/protocols/js5/cache/cache.js';
import { splitTrailer } from '../../../src/protocols/js5/cache/container.js';
import { createDemoCache, DEMO_ARCHIVES } from '../../../src/protocols/js5/cache/demo.js';
import { createMasterIndex } from '../../../src/protocols/js5/cache/master-index.js';
import { createStore, openStore } from '../../../src/protocols/js5/cache/store.js';
import { frameResponse, responseMeasure, unframeResponse } from '../../../src/protocols/js5/framing.js';
import type { Js5Profile } from '../../../src/protocols/js5/profiles.js';
import { Js5Server } from '../../../src/protocols/js5/server.js';
import { StreamDeframer } from '../../../src/wire/framing.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { demoCache, RawPeer, startServer, tempDir } from './helpers.js';

const servers: Js5Server[] = [];
const peers: RawPeer[] = [];
afterAll(async () => {
  for (const p of peers) p.destroy();
  await Promise.all(servers.map((s) => s.close()));
});

function hex(build: number): string {
  return build.toString(16).padStart(8, '0');
}

async function handshaken(s: Js5Server): Promise<RawPeer> {
  const p = await RawPeer.connect(s.port);
  peers.push(p);
  p.send(`0f${hex(s.build)}${s.profile.name === 'osrs' && s.build >= 223 ? '00'.repeat(16) : ''}`);
  await p.waitFor(1);
  expect(p.received[0]).toBe(0);
  p.received = p.received.subarray(1);
  return p;
}

interface Seen {
  archive: number;
  group: number;
  flagged: boolean;
}

/** Splits a received byte stream into responses (as a client reads it). */
function responses(bytes: Buffer): Seen[] {
  const out: Seen[] = [];
  const d = new StreamDeframer(responseMeasure(), { maxFrameBytes: 1 << 25 });
  d.push(Buffer.from(bytes), (buf, start, end) => {
    const plain = unframeResponse(buf, start, end);
    out.push({ archive: plain[0]!, group: plain.readUInt16BE(1), flagged: (plain[3]! & 0x80) !== 0 });
    return true;
  });
  return out;
}

function framedSize(dir: string, archive: number, group: number): number {
  const store = openStore(dir);
  const container = splitTrailer(store.read(archive, group)!).container;
  store.close();
  return frameResponse(archive, group, container).length;
}

describe('an upgraded prefetch is still answered (issue: 530 leaked a prefetch slot per upgrade)', () => {
  // After the handshake and `06 000003 02 000000`, prefetch 4/0…4/5, then urgent 4/5, in one write.
  const burst = '06000003 02000000 00040000 00040001 00040002 00040003 00040004 00040005 01040005';

  test.each(['530', '435', 'osrs'] as Js5Profile[])(
    '%s: every request gets its response, as the client matches them',
    async (profile) => {
      const { server: s } = await startServer(profile);
      servers.push(s);
      const p = await handshaken(s);
      p.send(burst);
      let total = 0;
      for (let g = 0; g <= 5; g++) total += framedSize(demoCache(), 4, g);
      total += framedSize(demoCache(), 4, 5);
      await p.waitFor(total, 20_000);
      await elapse(100, 'no response beyond the expected ones may come');
      expect(p.length).toBe(total);
      const seen = responses(p.received);
      // Model of the client's in-flight lists: each response must match (and remove) one entry.
      const prefetch = new Set(['4/0', '4/1', '4/2', '4/3', '4/4', '4/5']);
      const urgent = new Set(['4/5']);
      for (const r of seen) {
        const key = `${r.archive}/${r.group}`;
        if (profile === '530') {
          // 530: the 0x80 bit chooses the list; an unmatched response is an IOException.
          const list = r.flagged ? prefetch : urgent;
          expect(list.has(key)).toBe(true);
          list.delete(key);
        } else {
          // 435 and OSRS: no flag; the urgent list is searched first, then the prefetch list.
          expect(r.flagged).toBe(false);
          if (urgent.has(key)) urgent.delete(key);
          else {
            expect(prefetch.has(key)).toBe(true);
            prefetch.delete(key);
          }
        }
      }
      expect([...urgent, ...prefetch]).toEqual([]);
      expect(seen.filter((r) => r.group === 5)).toHaveLength(2);
    },
  );
});

/** A cache with archive 0 only (so 255/5 is missing), as in the reproduction. */
function smallCache(): string {
  const dir = path.join(tempDir(), 'small');
  const store = createStore(dir, 'disk');
  const w = new CacheWriter(store);
  w.index(0, { protocol: 6 });
  w.putGroup(0, 0, Buffer.alloc(3000, 7), { compression: 'none' });
  w.putGroup(0, 1, Buffer.alloc(40, 1), { compression: 'gzip' });
  w.flush();
  store.close();
  return dir;
}

describe('--missing-group close: a missing group does not discard responses already queued', () => {
  test('`01ff0000 01ff0005` in one segment: 255/0 arrives, then the connection closes', async () => {
    const dir = smallCache();
    const { server: s, metrics } = await startServer('530', { missingGroup: 'close' }, dir);
    servers.push(s);
    const p = await handshaken(s);
    p.send('01ff0000 01ff0005');
    const store = openStore(dir);
    const index0 = frameResponse(255, 0, store.read(255, 0)!);
    store.close();
    expect(await p.waitClosed()).toBe(true);
    expect(p.received.equals(index0)).toBe(true);
    expect(metrics.closed.get('missing_group')).toBe(1);
  });

  test('everything queued before the bad request is sent (prefetch too); nothing after it', async () => {
    const dir = smallCache();
    const { server: s } = await startServer('530', { sliceBytes: 512, missingGroup: 'close' }, dir);
    servers.push(s);
    const p = await handshaken(s);
    p.send('00000000 01000001 01ff0005 01000001');
    expect(await p.waitClosed()).toBe(true);
    const seen = responses(p.received);
    expect(seen).toEqual([
      { archive: 0, group: 1, flagged: false },
      { archive: 0, group: 0, flagged: true },
    ]);
  });
});

describe('create-demo lays out what each client expects', () => {
  test.each(Object.entries(DEMO_ARCHIVES))(
    '%s: %i archives, every one with an index (no holes)',
    (profile, n) => {
      const dir = path.join(tempDir(), `demo-${profile}`);
      const summary = createDemoCache(dir, { profile: profile as Js5Profile });
      expect(summary.archives).toBe(n);
      const store = openStore(dir);
      const master = createMasterIndex(store, 'versioned');
      expect(master.entries).toHaveLength(n);
      for (let a = 0; a < n; a++) {
        expect(master.entries[a]!.checksum).not.toBe(0);
        const idx = readArchiveIndex(store, a)!;
        expect(idx.groups.length).toBeGreaterThan(0);
        // 435 gets protocol-5 indexes; the others keep protocol 6 where the test content has it.
        if (profile === '435') expect(idx.protocol).toBe(5);
        // The 530 client and runelite's OSRS reader accept only the names flag.
        expect(idx.flags & ~1).toBe(0);
      }
      // The test content is kept: marker-edge sizes, compressions, the sparse 65535 id.
      expect(readArchiveIndex(store, 1)!.groups).toHaveLength(20);
      expect(readArchiveIndex(store, 6)!.groups.map((g) => g.id)).toContain(65_535);
      store.close();
      expect(summary.storedBytes).toBeGreaterThan(0);
      expect(summary.unpackedBytes).toBeGreaterThan(0);
    },
  );
});

/** A pino logger that keeps its JSON lines. */
function captureLog(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      done();
    },
  });
  return { log: pino({ level: 'info' }, stream), lines };
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  await waitFor(cond, { what: String(cond), timeoutMs: ms });
}

describe('operators see what clients see (info logs, rate-limited)', () => {
  test('wrong build (both builds), full server, missing group (with the group); repeats are held back and counted', async () => {
    const { log, lines } = captureLog();
    const s = new Js5Server({
      host: '127.0.0.1',
      port: 0,
      store: openStore(demoCache()),
      profile: '530',
      maxClients: 1,
      logIntervalMs: 60_000,
      missingGroup: 'close',
      log,
      metrics: new ProtocolMetrics('js5'),
    });
    await s.listen();
    servers.push(s);
    for (let i = 0; i < 3; i++) {
      const old = await RawPeer.connect(s.port);
      peers.push(old);
      old.send(`0f${hex(529)}`);
      await old.waitClosed();
    }
    const first = await handshaken(s);
    const second = await RawPeer.connect(s.port);
    peers.push(second);
    second.send(`0f${hex(530)}`);
    expect((await second.waitFor(1))[0]).toBe(7);
    first.send('0100fff0');
    await first.waitClosed();
    await until(() => lines.some((l) => l.reason === 'missing_group'));
    const wrong = lines.filter((l) => l.reason === 'out_of_date');
    expect(wrong).toHaveLength(1);
    expect(wrong[0]).toMatchObject({ level: 30, clientBuild: 529, serverBuild: 530 });
    expect(String(wrong[0]!.msg)).toMatch(/529.*530/);
    expect(lines.filter((l) => l.reason === 'server_full')).toHaveLength(1);
    expect(lines.find((l) => l.reason === 'server_full')).toMatchObject({ level: 30, maxClients: 1 });
    expect(lines.find((l) => l.reason === 'missing_group')).toMatchObject({
      level: 30,
      archive: 0,
      group: 0xfff0,
    });
  });
});
