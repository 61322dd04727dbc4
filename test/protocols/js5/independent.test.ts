/**
 * The acceptance scenario, with an independent writer and an independent client: the
 * cache is written here by hand (no gamewire cache code), sectors deliberately out of order, and
 * a scripted 530-style client speaks raw bytes and parses the framing itself.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, expect, test } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { openStore } from '../../../src/protocols/js5/cache/store.js';
import { Js5Server } from '../../../src/protocols/js5/server.js';
import { RawPeer, tempDir } from './helpers.js';

const int = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n | 0);
  return b;
};
const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);

function container(data: Buffer, gzip: boolean): Buffer {
  if (!gzip) return Buffer.concat([Buffer.of(0), int(data.length), data]);
  const z = zlib.gzipSync(data);
  return Buffer.concat([Buffer.of(2), int(z.length), int(data.length), z]);
}

/** Writes a dat2/idx cache; groups' sectors are placed in a shuffled order. */
function writeCache(dir: string, groups: { archive: number; group: number; stored: Buffer }[]): void {
  const sectors: { at: number; bytes: Buffer }[] = [];
  const idx = new Map<number, Buffer>();
  // Reserve sector numbers first, then hand them out from the end, interleaving groups.
  const chunks = groups.map((g) => Math.max(1, Math.ceil(g.stored.length / 512)));
  const total = chunks.reduce((a, b) => a + b, 0);
  const order = Array.from({ length: total }, (_, i) => total - i); // sectors total..1
  let next = 0;
  const assigned = chunks.map((n) => {
    const nums = order.slice(next, next + n);
    next += n;
    return nums;
  });
  groups.forEach((g, i) => {
    const nums = assigned[i]!;
    nums.forEach((num, c) => {
      const data = g.stored.subarray(c * 512, (c + 1) * 512);
      const header = Buffer.concat([u16(g.group), u16(c), Buffer.from([0, 0, 0]), Buffer.of(g.archive)]);
      header.writeUIntBE(c + 1 < nums.length ? nums[c + 1]! : 0, 4, 3);
      sectors.push({ at: num * 520, bytes: Buffer.concat([header, data]) });
    });
    let file = idx.get(g.archive) ?? Buffer.alloc(0);
    if (file.length < (g.group + 1) * 6)
      file = Buffer.concat([file, Buffer.alloc((g.group + 1) * 6 - file.length)]);
    file.writeUIntBE(g.stored.length, g.group * 6, 3);
    file.writeUIntBE(nums[0]!, g.group * 6 + 3, 3);
    idx.set(g.archive, file);
  });
  const end = Math.max(...sectors.map((s) => s.at + s.bytes.length));
  const dat = Buffer.alloc(end);
  for (const s of sectors) s.bytes.copy(dat, s.at);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'main_file_cache.dat2'), dat);
  for (const [a, f] of idx) fs.writeFileSync(path.join(dir, `main_file_cache.idx${a}`), f);
}

/** Strips 0xFF markers at response offsets 512, 1024, …; checks each is 0xFF. */
function unframe(bytes: Buffer): Buffer {
  const out: number[] = [];
  for (let i = 0; i < bytes.length; i++) {
    if (i > 0 && i % 512 === 0) {
      expect(bytes[i]).toBe(0xff);
      continue;
    }
    out.push(bytes[i]!);
  }
  return Buffer.from(out);
}

function framedSize(header: Buffer): number {
  const type = header[3]! & 0x7f;
  const plain = 3 + (type === 0 ? 5 : 9) + header.readInt32BE(4);
  return plain <= 512 ? plain : plain + Math.ceil((plain - 512) / 511);
}

/** Reads one response from the peer at `offset`; returns [plain bytes, new offset]. */
async function readResponse(p: RawPeer, offset: number, key = 0): Promise<[Buffer, number]> {
  await p.waitFor(offset + 8);
  const head = Buffer.from(p.received.subarray(offset, offset + 8));
  for (let i = 0; i < 8; i++) head[i]! ^= key;
  const size = framedSize(head);
  const raw = Buffer.from((await p.waitFor(offset + size)).subarray(offset, offset + size));
  for (let i = 0; i < raw.length; i++) raw[i]! ^= key;
  return [unframe(raw), offset + size];
}

let server: Js5Server | undefined;
afterAll(async () => {
  await server?.close();
});

test('a scripted 530 client against a cache written by an independent writer', async () => {
  // Two archives; group sizes across the marker boundaries; gzip and none.
  const payloads = new Map<string, Buffer>();
  const groups: { archive: number; group: number; stored: Buffer }[] = [];
  const indexes: Buffer[] = [];
  const spec: [number, number[]][] = [
    [0, [504, 505, 1015, 1016, 1526, 1527, 40_000]],
    [1, [3, 700]],
  ];
  for (const [archive, sizes] of spec) {
    const ids = sizes.map((_, i) => i * 2);
    const entries = sizes.map((size, i) => {
      const data = Buffer.alloc(size, (archive * 31 + i) & 0xff);
      const c = container(data, i % 3 === 2);
      payloads.set(`${archive}/${ids[i]}`, c);
      const version = 7 + i;
      groups.push({ archive, group: ids[i]!, stored: Buffer.concat([c, u16(version)]) });
      return { id: ids[i]!, crc: zlib.crc32(c) | 0, version };
    });
    // Js5Index protocol 6, no flags; one file per group.
    const index = Buffer.concat([
      Buffer.of(6),
      int(archive + 100),
      Buffer.of(0),
      u16(entries.length),
      ...entries.map((e, i) => u16(i === 0 ? e.id : e.id - entries[i - 1]!.id)),
      ...entries.map((e) => int(e.crc)),
      ...entries.map((e) => int(e.version)),
      ...entries.map(() => u16(1)),
      ...entries.map(() => u16(0)),
    ]);
    const ic = container(index, true);
    indexes.push(ic);
    groups.push({ archive: 255, group: archive, stored: ic });
  }
  const dir = path.join(tempDir(), 'indep');
  writeCache(dir, groups);

  server = new Js5Server({
    host: '127.0.0.1',
    port: 0,
    store: openStore(dir),
    profile: '530',
    build: 530,
    log: silentLogger(),
    metrics: new ProtocolMetrics('js5'),
  });
  await server.listen();

  // Wrong build: 06 and closed.
  const old = await RawPeer.connect(server.port);
  old.send('0f00000211');
  expect((await old.waitFor(1))[0]).toBe(6);
  expect(await old.waitClosed()).toBe(true);

  const p = await RawPeer.connect(server.port);
  p.send('0f00000212');
  expect((await p.waitFor(1))[0]).toBe(0);
  p.send('06000003 03000000 01ff00ff'.replace(/\s/g, ''));
  let off = 1;
  let plain: Buffer;
  [plain, off] = await readResponse(p, off);
  // Master index: type 0, VERSIONED, crc of the stored index container + index version.
  expect(plain.subarray(0, 4).toString('hex')).toBe('ff00ff00');
  expect(plain.readInt32BE(4)).toBe(16);
  expect(plain.readInt32BE(8)).toBe(zlib.crc32(indexes[0]!) | 0);
  expect(plain.readInt32BE(12)).toBe(100);
  expect(plain.readInt32BE(16)).toBe(zlib.crc32(indexes[1]!) | 0);
  expect(plain.readInt32BE(20)).toBe(101);
  for (const a of [0, 1]) {
    p.send(Buffer.from([1, 255, 0, a]));
    [plain, off] = await readResponse(p, off);
    expect(plain[3]).toBe(2); // urgent: no 0x80
    expect(plain.subarray(3).equals(indexes[a]!)).toBe(true);
  }
  // Every group as prefetch (0x80 set), then one urgently (no 0x80); byte-identical containers.
  for (const [key, c] of payloads) {
    const [a, g] = key.split('/').map(Number) as [number, number];
    p.send(Buffer.from([0, a, g >> 8, g & 0xff]));
    [plain, off] = await readResponse(p, off);
    expect(plain[3]! & 0x80).toBe(0x80);
    plain[3]! &= 0x7f;
    expect(plain.subarray(0, 3).equals(Buffer.from([a, g >> 8, g & 0xff]))).toBe(true);
    expect(plain.subarray(3).equals(c)).toBe(true);
  }
  p.send('01000002');
  [plain, off] = await readResponse(p, off);
  expect(plain.subarray(3).equals(payloads.get('0/2')!)).toBe(true);
  // Rekey: every byte after it is XORed.
  p.send('045a0000 0100000c'.replace(/\s/g, ''));
  [plain, off] = await readResponse(p, off, 0x5a);
  expect(plain.subarray(3).equals(payloads.get('0/12')!)).toBe(true);
  // Unknown opcode closes.
  p.send('08000000');
  expect(await p.waitClosed()).toBe(true);
  expect(p.received.length).toBe(off);
  p.destroy();
});
