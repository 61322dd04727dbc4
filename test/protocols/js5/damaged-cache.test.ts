/**
 * A damaged cache (issue 21 item 13): one bad byte must not stop `serve js5` or `js5 cache
 * verify`. Real generated demo caches (both store kinds) are damaged on disk; `verify` (spawned)
 * must list each problem and go on; `serve js5` (spawned) must start, serve every good group
 * (downloaded with the project's client and checked against the indexes' CRCs) and answer the
 * bad ones as missing. A property test flips or truncates random bytes of a small cache.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { CacheWriter, verifyCache } from '../../../src/protocols/js5/cache/cache.js';
import { decodeContainer } from '../../../src/protocols/js5/cache/container.js';
import { createDemoCache } from '../../../src/protocols/js5/cache/demo.js';
import { readIndex } from '../../../src/protocols/js5/cache/js5-index.js';
import { crc32 } from '../../../src/protocols/js5/cache/master-index.js';
import { createStore, openStore, SECTOR_SIZE } from '../../../src/protocols/js5/cache/store.js';
import { Js5Client } from '../../../src/protocols/js5/client.js';
import { ResponseSource, requestKey } from '../../../src/protocols/js5/responses.js';
import { BIN, cliEnv, ROOT, runCliAsync } from '../../helpers/cli.js';
import { limited, tempDir } from './helpers.js';

/** The tests run concurrently: at most 2 `verify`/`info` commands at a time across them. */
const runCli = limited(2, runCliAsync);

type Kind = 'disk' | 'flat';

/** Each test spawns `verify` and `serve` and downloads a whole cache: generous on a loaded machine. */
const SPAWNS_TIMEOUT_MS = 180_000;
vi.setConfig({ testTimeout: SPAWNS_TIMEOUT_MS });

const demos: Record<Kind, string> = { disk: '', flat: '' };

beforeAll(() => {
  for (const kind of ['disk', 'flat'] as const) {
    demos[kind] = path.join(tempDir(), `demo-${kind}`);
    createDemoCache(demos[kind], { kind, profile: '530' });
  }
}, SPAWNS_TIMEOUT_MS);

/** A fresh copy of the 530 demo cache of `kind`. */
function copyOf(kind: Kind): string {
  const dir = path.join(tempDir(), 'cache');
  fs.cpSync(demos[kind], dir, { recursive: true });
  return dir;
}

/** Where group `archive/group`'s stored bytes start in the cache files, and how many there are. */
function locate(
  dir: string,
  kind: Kind,
  archive: number,
  group: number,
): { file: string; at: number; size: number } {
  if (kind === 'flat') {
    const file = path.join(dir, String(archive), `${group}.dat`);
    return { file, at: 0, size: fs.statSync(file).size };
  }
  const idx = fs.readFileSync(path.join(dir, `main_file_cache.idx${archive}`));
  const size = idx.readUIntBE(group * 6, 3);
  const sector = idx.readUIntBE(group * 6 + 3, 3);
  // The first sector's data starts after its 8-byte header; a byte within its first 512 is there.
  return { file: path.join(dir, 'main_file_cache.dat2'), at: sector * SECTOR_SIZE + 8, size };
}

/** Flips one byte of the stored group, `offset` bytes into it (within its first sector). */
function flipStoredByte(dir: string, kind: Kind, archive: number, group: number, offset: number): void {
  const { file, at, size } = locate(dir, kind, archive, group);
  expect(offset).toBeLessThan(Math.min(size, 512));
  const bytes = fs.readFileSync(file);
  bytes[at + offset]! ^= 0xff;
  fs.writeFileSync(file, bytes);
}

function storedBytes(dir: string, archive: number, group: number): Buffer {
  const store = openStore(dir);
  try {
    return store.read(archive, group)!;
  } finally {
    store.close();
  }
}

const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
});

/** Spawns `gamewire serve js5 --cache DIR` on port 0; resolves with its port and its output so far. */
async function serve(
  dir: string,
  extra: string[] = [],
): Promise<{ child: ChildProcess; port: number; output: () => string }> {
  const child = spawn(
    process.execPath,
    [BIN, 'serve', 'js5', '--cache', dir, '--port', '0', '--host', '127.0.0.1', ...extra],
    { cwd: ROOT, env: cliEnv() },
  );
  children.push(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const port = await new Promise<number>((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`serve js5 exited with ${code}: ${out}`));
    child.once('exit', onExit);
    const check = () => {
      const m = /js5 tcp 127\.0\.0\.1:(\d+)/.exec(out);
      if (m) {
        child.off('exit', onExit);
        child.stdout!.off('data', check);
        resolve(Number(m[1]));
      }
    };
    child.stdout!.on('data', check);
  });
  return { child, port, output: () => out };
}

async function stop(child: ChildProcess): Promise<number | null> {
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill('SIGTERM');
  return exited;
}

function connect(port: number): Promise<Js5Client> {
  return Js5Client.connect({ host: '127.0.0.1', port, build: 530, profile: '530', timeoutMs: 10_000 });
}

/**
 * Downloads every index and group the server lists, except `skip`, checking each index's CRC and
 * version against the master index and each group's CRC against its index. Returns the master
 * index and the count of groups checked.
 */
async function downloadGood(port: number, skip: Set<number>) {
  const client = await connect(port);
  try {
    const master = await client.masterIndex();
    let groups = 0;
    for (const [archive, entry] of master.entries.entries()) {
      // (0, 0): no index the store can read (a hole).
      if (skip.has(requestKey(255, archive)) || (entry.checksum === 0 && entry.version === 0)) continue;
      const stored = await client.request(255, archive, true);
      expect(crc32(stored)).toBe(entry.checksum);
      const index = readIndex(decodeContainer(stored, 'none').data);
      expect(index.version).toBe(entry.version);
      const wanted = index.groups.filter((g) => !skip.has(requestKey(archive, g.id)));
      const got = await Promise.all(wanted.map((g) => client.request(archive, g.id)));
      expect(got.map(crc32)).toEqual(wanted.map((g) => g.checksum));
      groups += got.length;
    }
    return { master, groups };
  } finally {
    await client.close();
  }
}

/**
 * Requests one group and expects the server to answer it as missing with the default
 * `--missing-group drop`: never answered, while a good group asked after it still is.
 */
async function expectAnsweredAsMissing(port: number, archive: number, group: number): Promise<void> {
  const client = await connect(port);
  const bad = client.request(archive, group, true);
  bad.catch(() => {});
  await expect(client.request(0, 0, true)).resolves.toBeInstanceOf(Buffer);
  expect(client.inFlight).toBe(1); // the bad one: never answered (the client's watchdog handles it)
  await client.close();
}

// The cases are independent (each damages its own copy and spawns its own server): concurrent.
describe.concurrent.each(['disk', 'flat'] as const)('a damaged 530 demo cache (%s store)', (kind) => {
  test('a bad byte in the index 255/5: verify lists it; serve starts, serves every other group, answers 255/5 as missing', async () => {
    const dir = copyOf(kind);
    // Inside the gzip stream of the index, near its end (its CRC/length check).
    const size = locate(dir, kind, 255, 5).size;
    flipStoredByte(dir, kind, 255, 5, size - 3);
    const stored = storedBytes(dir, 255, 5);

    const verified = await runCli(['js5', 'cache', 'verify', dir]);
    expect(verified.code).toBe(1);
    const report = JSON.parse(verified.stdout);
    expect(report.ok).toBe(false);
    expect(report.problems).toEqual([
      { archive: 255, group: 5, code: 'ERR_JS5_BAD_GZIP', message: expect.stringMatching(/gzip/) },
    ]);
    // Every other archive was checked, and found good.
    expect(report.archives).toBe(27);
    expect(JSON.parse(verified.stderr.trim()).error.code).toBe('ERR_JS5_VERIFY');

    const info = await runCli(['js5', 'cache', 'info', dir]);
    expect(info.code).toBe(0);
    expect(JSON.parse(info.stdout).problems).toHaveLength(1);

    const { child, port, output } = await serve(dir);
    // The start-up warning names the bad index (stderr: it may arrive after stdout's start-up line).
    await vi.waitFor(() => expect(output()).toMatch(/"archive":255,"group":5,"code":"ERR_JS5_BAD_GZIP"/), {
      timeout: 15_000,
    });
    const { master, groups } = await downloadGood(port, new Set([requestKey(255, 5)]));
    expect(master.entries).toHaveLength(28);
    // The master index holds the CRC of what is stored (what a client would check it against);
    // the version is inside what does not decode: 0.
    expect(master.entries[5]).toEqual({ checksum: crc32(stored), version: 0 });
    expect(groups).toBe(212 - 3); // archive 5's three groups cannot be served without its index
    await expectAnsweredAsMissing(port, 255, 5);
    await expectAnsweredAsMissing(port, 5, 0);
    expect(await stop(child)).toBe(0);
  });

  test('a bad byte in a group: verify lists it with its CRC; serve answers it as missing, and logs it', async ({
    expect,
  }) => {
    // (The test's own expect: expect.poll needs it in a concurrent test.)
    const dir = copyOf(kind);
    flipStoredByte(dir, kind, 2, 20, 12);
    const verified = await runCli(['js5', 'cache', 'verify', dir]);
    expect(verified.code).toBe(1);
    const report = JSON.parse(verified.stdout);
    expect(report.problems).toEqual([
      {
        archive: 2,
        group: 20,
        code: 'ERR_JS5_CRC',
        message: expect.stringMatching(/^crc -?\d+ != index -?\d+$/),
      },
    ]);
    expect(report.groups).toBe(212);

    const { child, port, output } = await serve(dir);
    const { groups } = await downloadGood(port, new Set([requestKey(2, 20)]));
    expect(groups).toBe(211);
    await expectAnsweredAsMissing(port, 2, 20);
    await expect.poll(output).toMatch(/"reason":"bad_group","archive":2,"group":20,"code":"ERR_JS5_CRC"/);
    // Known bad from then on: answered as missing again, without a second log line in the interval.
    await expectAnsweredAsMissing(port, 2, 20);
    expect(await stop(child)).toBe(0);
    expect(output().match(/"reason":"bad_group"/g)).toHaveLength(1);
  });

  test('with --missing-group close, what was queued before a bad group is served, then the connection closes', async () => {
    const dir = copyOf(kind);
    flipStoredByte(dir, kind, 1, 3, 40);
    const { child, port } = await serve(dir, ['--missing-group', 'close']);
    const client = await connect(port);
    // A good group queued first is still served; then the server closes.
    const first = client.request(1, 4, true);
    const bad = client.request(1, 3, true);
    await expect(first).resolves.toBeInstanceOf(Buffer);
    await expect(bad).rejects.toMatchObject({ code: 'ERR_JS5_CLOSED' });
    await client.close();
    expect(await stop(child)).toBe(0);
  });

  test('a truncated cache file: every lost index and group is listed, the rest is served', async () => {
    const dir = copyOf(kind);
    if (kind === 'flat') {
      const f = path.join(dir, '4', '2.dat');
      fs.truncateSync(f, Math.floor(fs.statSync(f).size / 2));
    } else {
      // Cut the data file 100 bytes short: the last thing written there is lost.
      const dat = path.join(dir, 'main_file_cache.dat2');
      fs.truncateSync(dat, fs.statSync(dat).size - 100);
    }
    const verified = await runCli(['js5', 'cache', 'verify', dir]);
    expect(verified.code).toBe(1);
    const report = JSON.parse(verified.stdout) as {
      groups: number;
      problems: { archive: number; group: number; code: string }[];
    };
    expect(report.problems.length).toBeGreaterThanOrEqual(1);
    for (const p of report.problems) expect(p.code).toMatch(/^ERR_(JS5_STORE_CORRUPT|INCOMPLETE)$/);
    if (kind === 'flat') {
      expect(report.problems).toEqual([
        expect.objectContaining({ archive: 4, group: 2, code: 'ERR_INCOMPLETE' }),
      ]);
    }
    const skip = new Set(report.problems.map((p) => requestKey(p.archive, p.group)));
    const badGroups = report.problems.filter((p) => p.archive !== 255).length;
    const { child, port } = await serve(dir);
    const { groups } = await downloadGood(port, skip);
    // Every group of every index that still reads, but the bad ones.
    expect(groups).toBe(report.groups - badGroups);
    expect(await stop(child)).toBe(0);
  });
});

// ---- property: random damage never crashes verify or the server's cache loading ---------------

/** A small cache of both kinds: 3 archives, groups of every compression, some over one sector. */
function smallCache(kind: Kind): string {
  const dir = path.join(tempDir(), `small-${kind}`);
  const store = createStore(dir, kind);
  const w = new CacheWriter(store);
  const compressions = ['none', 'gzip', 'bzip2'] as const;
  for (let archive = 0; archive < 3; archive++) {
    w.index(archive, { protocol: archive === 2 ? 5 : 6, flags: archive === 1 ? 1 : 0 });
    for (let g = 0; g < 5; g++) {
      const data = Buffer.alloc(g === 4 ? 1500 : 40 + g * 30, (archive * 7 + g) & 0xff);
      data.write(`group ${archive}/${g}`);
      w.putGroup(archive, g * 3, data, { compression: compressions[g % 3]!, nameHash: g });
    }
  }
  w.flush();
  store.close();
  return dir;
}

/** Every file of the cache, relative to it. */
function filesOf(dir: string): string[] {
  return (fs.readdirSync(dir, { recursive: true }) as string[])
    .filter((f) => fs.statSync(path.join(dir, f)).isFile())
    .sort();
}

const damage = fc.record({
  file: fc.nat(),
  at: fc.nat(),
  xor: fc.integer({ min: 1, max: 255 }),
  truncate: fc.boolean(),
});

describe('random damage (property)', () => {
  test.each(['disk', 'flat'] as const)(
    '%s store: any flipped byte or truncation gives listed typed problems, never a throw',
    (kind) => {
      const pristine = smallCache(kind);
      const files = filesOf(pristine);
      fc.assert(
        fc.property(damage, ({ file, at, xor, truncate }) => {
          const dir = path.join(tempDir(), 'damaged');
          fs.cpSync(pristine, dir, { recursive: true });
          const f = path.join(dir, files[file % files.length]!);
          const bytes = fs.readFileSync(f);
          if (bytes.length === 0) return;
          if (truncate) fs.truncateSync(f, at % bytes.length);
          else {
            bytes[at % bytes.length]! ^= xor;
            fs.writeFileSync(f, bytes);
          }
          const store = openStore(dir);
          try {
            const result = verifyCache(store);
            for (const p of result.problems) {
              expect(p.code).toMatch(/^ERR_/);
              expect(p.code).not.toBe('ERR_INTERNAL');
            }
            const source = new ResponseSource(store, {
              masterIndexFormat: 'versioned',
              cacheBytes: 1 << 20,
              preload: false,
              preloadMaxBytes: 1 << 30,
            });
            // Every key a client can ask for: served, or answered as missing; never a throw.
            expect(source.get(requestKey(255, 255))).toBeInstanceOf(Buffer);
            for (let archive = 0; archive < 4; archive++) {
              source.get(requestKey(255, archive));
              for (let group = 0; group < 15; group++) source.get(requestKey(archive, group));
            }
            for (const p of source.problems) expect(p.code).not.toBe('ERR_INTERNAL');
            // What the server answers, verify does not call good: a served group passes verify.
            const listed = new Set(result.problems.map((p) => requestKey(p.archive, p.group)));
            for (const p of source.problems) {
              if (p.archive !== 255) expect(listed.has(requestKey(p.archive, p.group))).toBe(true);
            }
          } finally {
            store.close();
            fs.rmSync(dir, { recursive: true, force: true });
          }
        }),
        { numRuns: 150 },
      );
    },
  );

  test('spawned: serve js5 starts and answers the master index whatever index or group of the demo has a bad byte', async () => {
    // A few runs only: each spawns the real CLI. A third of them damage an index.
    const samples = fc.sample(
      fc.record({
        kind: fc.constantFrom<Kind>('disk', 'flat'),
        index: fc.integer({ min: 0, max: 2 }).map((n) => n === 0),
        archive: fc.nat({ max: 27 }),
        group: fc.nat({ max: 2 }),
        at: fc.nat({ max: 63 }),
      }),
      { numRuns: 6, seed: 1 },
    );
    // Each sample damages its own copy and spawns its own server: all at once.
    await Promise.all(
      samples.map(async ({ kind, index, archive, group, at }) => {
        const dir = copyOf(kind);
        // Every archive of the 530 demo has groups 0–2.
        const [a, g] = index ? [255, archive] : [archive, group];
        flipStoredByte(dir, kind, a, g, at % Math.min(locate(dir, kind, a, g).size, 512));
        const { child, port } = await serve(dir);
        const client = await connect(port);
        const master = await client.masterIndex();
        expect(master.entries).toHaveLength(28);
        await client.close();
        expect(await stop(child)).toBe(0);
      }),
    );
  });
});
