/**
 * JS5 serving throughput: a synthetic cache of ≥ 50 MB (groups from 100 B to 512 KB) served to
 * 1 and 8 concurrent downloader clients (Js5Client, OSRS profile: 200 requests in flight).
 * Baseline: the same framed bytes, prepared in memory, written by a minimal server (no
 * scheduling, no caps, no backpressure) to the same kind of loopback socket, fetched by the same
 * client, in the same run.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { silentLogger } from '../src/core/logger.js';
import { ProtocolMetrics } from '../src/core/metrics.js';
import { indexedArchives, readArchiveIndex } from '../src/protocols/js5/cache/cache.js';
import { splitTrailer } from '../src/protocols/js5/cache/container.js';
import { createSyntheticCache } from '../src/protocols/js5/cache/demo.js';
import { createMasterIndex, masterIndexContainer } from '../src/protocols/js5/cache/master-index.js';
import { openStore } from '../src/protocols/js5/cache/store.js';
import { Js5Client } from '../src/protocols/js5/client.js';
import { frameResponse } from '../src/protocols/js5/framing.js';
import { Js5Server } from '../src/protocols/js5/server.js';
import type { BenchResult, BenchRow, BenchSuite } from './harness.js';

const BUILD = 232;

interface Target {
  port: number;
  close(): Promise<void>;
}

/** The baseline: every framed response in a Map, written straight to the socket on request. */
async function baselineServer(frames: Map<number, Buffer>): Promise<Target> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.setNoDelay(true);
    let handshaken = false;
    let pending: Buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      let o = 0;
      if (!handshaken) {
        if (pending.length < 21) return;
        o = 21;
        handshaken = true;
        socket.write(Buffer.of(0));
      }
      for (; o + 4 <= pending.length; o += 4) {
        const op = pending[o]!;
        if (op > 1) continue;
        const f = frames.get(pending.readUIntBE(o + 1, 3));
        if (f !== undefined) socket.write(f);
      }
      pending = pending.subarray(o);
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        for (const s of sockets) s.destroy();
      }),
  };
}

const LRU_BYTES = 16 * 1024 * 1024;

async function gamewireServer(dir: string, preload: boolean): Promise<Target & { server: Js5Server }> {
  const server = new Js5Server({
    host: '127.0.0.1',
    port: 0,
    store: openStore(dir),
    profile: 'osrs',
    build: BUILD,
    preload,
    cacheBytes: LRU_BYTES,
    // Every bench client connects from 127.0.0.1: no per-address cap (as behind a proxy).
    maxPerIp: 0,
    log: silentLogger(),
    metrics: new ProtocolMetrics('js5'),
  });
  await server.listen();
  return { port: server.port, close: () => server.close(), server };
}

/** `clients` downloaders each fetch every group once; returns MB/s and groups/s (all clients). */
async function download(
  port: number,
  keys: number[],
  clients: number,
): Promise<{ mbps: number; gps: number; bytes: number }> {
  const conns = await Promise.all(
    Array.from({ length: clients }, () =>
      Js5Client.connect({ host: '127.0.0.1', port, build: BUILD, profile: 'osrs' }),
    ),
  );
  const start = performance.now();
  let bytes = 0;
  await Promise.all(
    conns.map(async (c) => {
      const before = c.bytesReceived;
      await Promise.all(keys.map((k) => c.request(k >>> 16, k & 0xffff, false)));
      bytes += c.bytesReceived - before;
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  await Promise.all(conns.map((c) => c.close()));
  return { mbps: bytes / 1e6 / seconds, gps: (keys.length * clients) / seconds, bytes };
}

function median<T extends { mbps: number }>(xs: T[]): T {
  return [...xs].sort((a, b) => a.mbps - b.mbps)[Math.floor(xs.length / 2)]!;
}

async function run(): Promise<BenchResult> {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-js5-bench-'));
  const notes: string[] = [];
  try {
    const dir = path.join(tmp, 'cache');
    const t0 = performance.now();
    const summary = createSyntheticCache(dir, 52 * 1024 * 1024);
    notes.push(
      `synthetic cache: ${summary.groups} groups, ${(summary.unpackedBytes / 1e6).toFixed(1)} MB, generated in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    // Pre-frame everything for the baseline, and list the keys to fetch.
    const store = openStore(dir);
    const frames = new Map<number, Buffer>();
    const keys: number[] = [];
    frames.set(
      (255 << 16) | 255,
      frameResponse(255, 255, masterIndexContainer(createMasterIndex(store, 'versioned'))),
    );
    for (const a of indexedArchives(store)) {
      frames.set((255 << 16) | a, frameResponse(255, a, store.read(255, a)!));
      for (const g of readArchiveIndex(store, a)!.groups) {
        const key = (a << 16) | g.id;
        frames.set(key, frameResponse(a, g.id, splitTrailer(store.read(a, g.id)!).container));
        keys.push(key);
      }
    }
    store.close();

    const rows: BenchRow[] = [];
    const base = await baselineServer(frames);
    for (const preload of [true, false]) {
      const subject = await gamewireServer(dir, preload);
      for (const clients of [1, 8]) {
        // Warm-up pass on both (JIT, page cache), then 5 interleaved rounds; medians are kept.
        await download(subject.port, keys.slice(0, 300), 1);
        await download(base.port, keys.slice(0, 300), 1);
        const bs: Awaited<ReturnType<typeof download>>[] = [];
        const ss: Awaited<ReturnType<typeof download>>[] = [];
        for (let round = 0; round < 5; round++) {
          bs.push(await download(base.port, keys, clients));
          ss.push(await download(subject.port, keys, clients));
        }
        const b = median(bs);
        const s = median(ss);
        rows.push({
          name: `${clients} client${clients > 1 ? 's' : ''}, ${preload ? 'preloaded' : 'LRU 16 MiB over dat2'}`,
          subject: s.mbps,
          baseline: b.mbps,
          unit: 'MB/s',
          ratio: s.mbps / b.mbps,
          extra: { groupsPerSec: s.gps, baselineGroupsPerSec: b.gps, mbPerClient: s.bytes / clients / 1e6 },
        });
      }
      notes.push(
        `${preload ? 'preloaded' : 'LRU'} server: max urgent wait ${subject.server.stats.maxUrgentWaitBytes} B, ${subject.server.responses.stats.evictions} LRU evictions`,
      );
      await subject.close();
    }
    await base.close();
    notes.push(
      'client and servers share the same 2 cores; loopback only; osrs profile (200 + 200 in flight)',
    );
    return { suite: 'js5', rows, notes };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

export const suite: BenchSuite = {
  name: 'js5',
  description: 'JS5 cache serving to 1 and 8 downloaders vs pre-framed writes to the same sockets',
  run,
};
