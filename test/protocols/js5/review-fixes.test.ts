import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, test, vi } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { splitTrailer } from '../../../src/protocols/js5/cache/container.js';
import { createMasterIndex } from '../../../src/protocols/js5/cache/master-index.js';
import {
  createStore,
  DiskStore,
  FlatFileStore,
  openStore,
  StoreCorruptError,
  StoreReadError,
} from '../../../src/protocols/js5/cache/store.js';
import { Js5Client } from '../../../src/protocols/js5/client.js';
import { frameResponse } from '../../../src/protocols/js5/framing.js';
import { ResponseSource, requestKey } from '../../../src/protocols/js5/responses.js';
import { Js5Server } from '../../../src/protocols/js5/server.js';
import { DecodeError } from '../../../src/wire/errors.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { demoCache, RawPeer, startServer, tempDir } from './helpers.js';

const root = path.resolve(import.meta.dirname, '../../..');
const bin = path.join(root, 'bin', 'gamewire.js');

const servers: Js5Server[] = [];
const peers: RawPeer[] = [];
afterAll(async () => {
  for (const p of peers) p.destroy();
  await Promise.all(servers.map((s) => s.close()));
});

/** A flat-file copy of the demo cache. */
function flatDemo(): string {
  const dir = path.join(tempDir(), 'flat');
  const src = openStore(demoCache());
  const dst = createStore(dir, 'flat');
  for (const a of src.archives()) for (const g of src.list(a)) dst.write(a, g, src.read(a, g)!);
  src.close();
  dst.close();
  return dir;
}

describe('--js5-slice-bytes / sliceBytes', () => {
  test.each([0, -1, 1.5, Number.NaN])(
    'the constructor refuses sliceBytes %s with ERR_JS5_BAD_OPTION',
    (n) => {
      expect(
        () =>
          new Js5Server({
            host: '127.0.0.1',
            port: 0,
            store: openStore(demoCache()),
            profile: '530',
            sliceBytes: n,
            log: silentLogger(),
            metrics: new ProtocolMetrics('js5'),
          }),
      ).toThrow(expect.objectContaining({ code: 'ERR_JS5_BAD_OPTION' }));
    },
  );

  test.each(['0', '100'])('serve js5 --js5-slice-bytes %s is a usage error (exit 2), not a hang', (n) => {
    const r = spawnSync(
      process.execPath,
      [
        bin,
        'serve',
        'js5',
        '--port',
        '0',
        '--host',
        '127.0.0.1',
        '--data-dir',
        tempDir(),
        '--js5-slice-bytes',
        n,
      ],
      { cwd: root, encoding: 'utf8', timeout: 30_000 },
    );
    expect(r.signal).toBeNull();
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/js5-slice-bytes/);
  });

  test('serve js5 --js5-handshake-timeout-ms 0 is a usage error (exit 2) naming the flag', () => {
    const r = spawnSync(
      process.execPath,
      [
        bin,
        'serve',
        'js5',
        '--port',
        '0',
        '--host',
        '127.0.0.1',
        '--data-dir',
        tempDir(),
        '--js5-handshake-timeout-ms',
        '0',
      ],
      { cwd: root, encoding: 'utf8', timeout: 30_000 },
    );
    expect(r.signal).toBeNull();
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/js5-handshake-timeout-ms/);
  });

  test('a scheduler turn that sends nothing does not hold the event loop', async () => {
    const { server } = await startServer('530');
    servers.push(server);
    // Bypass the constructor's check to reach the scheduler's own safeguard.
    (server as unknown as { options: { sliceBytes: number } }).options.sliceBytes = 0;
    const p = await RawPeer.connect(server.port);
    peers.push(p);
    p.send(`0f${server.build.toString(16).padStart(8, '0')}`);
    await p.waitFor(1);
    p.send('01ff00ff');
    const t0 = Date.now();
    await elapse(50, 'a timer of 50 ms must fire within 2 s: the event loop is not held by the serving loop');
    expect(Date.now() - t0).toBeLessThan(2000);
  });
});

describe('flat-file store reads', () => {
  test('read() fills `into` when it is large enough (no allocation)', () => {
    const store = new FlatFileStore(flatDemo());
    const into = Buffer.alloc(64 * 1024);
    const got = store.read(255, 1, into)!;
    expect(got.buffer).toBe(into.buffer);
    expect(got.equals(openStore(demoCache()).read(255, 1)!)).toBe(true);
    const small = Buffer.alloc(1);
    expect(store.read(255, 1, small)!.buffer).not.toBe(small.buffer);
  });

  test('a cache miss on a flat store does not allocate a new scratch buffer', () => {
    const store = openStore(flatDemo());
    const src = new ResponseSource(store, {
      masterIndexFormat: 'versioned',
      cacheBytes: 0,
      preload: false,
      preloadMaxBytes: 0,
    });
    const scratchOf = () => (src as unknown as { scratch: Buffer }).scratch;
    const keys = [requestKey(0, 0), requestKey(1, 0), requestKey(1, 1), requestKey(0, 0)];
    expect(src.get(keys[0]!)).toBeDefined();
    const scratch = scratchOf();
    for (const k of keys) expect(src.get(k)).toBeDefined();
    expect(scratchOf()).toBe(scratch);
    expect(src.stats.misses).toBeGreaterThanOrEqual(5);
  });

  test('a directory where a group file should be is a typed error; the master index skips it', () => {
    const dir = flatDemo();
    const f = path.join(dir, '255', '2.dat');
    fs.rmSync(f);
    fs.mkdirSync(f);
    const store = new FlatFileStore(dir);
    expect(() => store.read(255, 2)).toThrow(StoreCorruptError);
    const m = createMasterIndex(store, 'versioned');
    expect(m.entries[2]).toEqual({ checksum: 0, version: 0 });
    expect(m.entries[1]!.checksum).not.toBe(0);
  });

  test('a file over 2 GiB is refused from its size, with a typed error', () => {
    const dir = flatDemo();
    const f = path.join(dir, '3', '0.dat');
    fs.truncateSync(f, 3 * 1024 * 1024 * 1024); // sparse
    const readFile = vi.spyOn(fs, 'readFileSync');
    try {
      expect(() => new FlatFileStore(dir).read(3, 0)).toThrow(
        expect.objectContaining({ code: 'ERR_JS5_STORE_CORRUPT' }),
      );
      expect(readFile).not.toHaveBeenCalled();
    } finally {
      readFile.mockRestore();
      fs.rmSync(f);
    }
  });

  test('a file that cannot be opened is a StoreReadError (ERR_JS5_STORE_READ)', () => {
    // A symlink loop fails to open with ELOOP, for root as for anyone (chmod would not stop root).
    const dir = flatDemo();
    const f = path.join(dir, '1', '0.dat');
    fs.rmSync(f);
    fs.symlinkSync(f, f);
    const err = (() => {
      try {
        new FlatFileStore(dir).read(1, 0);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(StoreReadError);
    expect(err).toBeInstanceOf(DecodeError);
    expect((err as StoreReadError).code).toBe('ERR_JS5_STORE_READ');
  });
});

describe('disk store reads', () => {
  test('an idx entry whose size cannot fit in the dat2 is refused before allocating it', () => {
    const dir = path.join(tempDir(), 'disk');
    const store = DiskStore.create(dir);
    store.write(0, 0, Buffer.alloc(1000, 7));
    store.close();
    const idx = path.join(dir, 'main_file_cache.idx0');
    const entry = fs.readFileSync(idx);
    entry.writeUIntBE(0xff_ffff, 0, 3); // declare 16 MiB − 1
    fs.writeFileSync(idx, entry);
    const reopened = DiskStore.open(dir);
    const alloc = vi.spyOn(Buffer, 'allocUnsafe');
    try {
      expect(() => reopened.read(0, 0)).toThrow(StoreCorruptError);
      expect(alloc.mock.calls.filter(([n]) => n >= 1024 * 1024)).toEqual([]);
    } finally {
      alloc.mockRestore();
      reopened.close();
    }
  });
});

describe('request queues', () => {
  test('client: a prefetch waiting at its cap does not hold back a later urgent request', async () => {
    const got: Buffer[] = [];
    const fake = net.createServer((sock) => {
      let first = true;
      sock.on('data', (d: Buffer) => {
        if (first) {
          first = false;
          sock.write(Buffer.from([0])); // handshake OK
          got.push(d.subarray(5));
        } else got.push(d);
      });
      sock.on('error', () => {});
    });
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
    const port = (fake.address() as net.AddressInfo).port;
    const c = await Js5Client.connect({
      host: '127.0.0.1',
      port,
      build: 530,
      profile: '530',
      prefetchCap: 2,
    });
    try {
      for (const g of [0, 1, 2]) c.request(1, g, false).catch(() => {});
      c.request(2, 5, true).catch(() => {});
      const hasUrgent = () => Buffer.concat(got).toString('hex').match(/.{8}/g)?.includes('01020005');
      await waitFor(hasUrgent, { what: 'the urgent response', timeoutMs: 3000 });
      // The third prefetch is still held back by the cap.
      expect(Buffer.concat(got).toString('hex').match(/.{8}/g)).not.toContain('00010002');
    } finally {
      await c.close();
      await new Promise<void>((r) => fake.close(() => r()));
    }
  });

  test('server (435): every request is answered, an upgraded prefetch included (no 0x80 for 435)', async () => {
    const { server } = await startServer('435');
    servers.push(server);
    const p = await RawPeer.connect(server.port);
    peers.push(p);
    p.send(`0f${server.build.toString(16).padStart(8, '0')}`);
    await p.waitFor(1);
    p.received = p.received.subarray(1);
    const store = openStore(demoCache());
    const frame = frameResponse(1, 0, splitTrailer(store.read(1, 0)!).container);
    store.close();
    // The 435 client matches a response to its urgent entry first, then to its prefetch entry:
    // both entries need a response, each the same unflagged bytes.
    p.send('00010000 00010000 01010000');
    expect((await p.waitFor(3 * frame.length)).equals(Buffer.concat([frame, frame, frame]))).toBe(true);
    await elapse(200, 'no fourth response may come');
    expect(p.length).toBe(3 * frame.length);
  });
});
