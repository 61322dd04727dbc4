import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { CacheWriter, readArchiveIndex, verifyCache } from '../../../src/protocols/js5/cache/cache.js';
import {
  decodeContainer,
  encodeContainer,
  splitTrailer,
} from '../../../src/protocols/js5/cache/container.js';
import { createDemoCache } from '../../../src/protocols/js5/cache/demo.js';
import { packGroup, unpackGroup } from '../../../src/protocols/js5/cache/group.js';
import {
  type Js5Index,
  nameHash,
  readIndex,
  writeIndex,
} from '../../../src/protocols/js5/cache/js5-index.js';
import {
  createMasterIndex,
  masterIndexContainer,
  readMasterIndex,
  writeMasterIndex,
} from '../../../src/protocols/js5/cache/master-index.js';
import {
  createStore,
  DiskStore,
  FlatFileStore,
  openStore,
  StoreCorruptError,
} from '../../../src/protocols/js5/cache/store.js';
import { whirlpool } from '../../../src/protocols/js5/cache/whirlpool.js';
import { DecodeError } from '../../../src/wire/errors.js';
import { tempDir } from './helpers.js';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');

describe('containers', () => {
  // OpenRS2 fixtures cache/compression/{none,bzip2,gzip,lzma}.dat; all decode to "OpenRS2".
  const fixtures: [string, string][] = [
    ['none', '00 00000007 4f70656e525332'],
    [
      'bzip2',
      '01 0000002e 00000007 314159265359875c636b0000008f801000000098000201400020 00221a63508601ab00f177245385090875c636b0',
    ],
    ['gzip', '02 0000001b 00000007 1f8b08003ea1585b0203 f32f48cd0b0a360200 eb0a5f98 07000000'],
    ['lzma', '03 00000011 00000007 5d 00008000 00279c08a70fdffeb3fd3800'],
  ];
  test.each(fixtures)('%s fixture decodes to OpenRS2', (_name, h) => {
    const c = decodeContainer(hex(h), 'none');
    expect(c.data.toString()).toBe('OpenRS2');
    expect(c.version).toBeUndefined();
    const withTrailer = decodeContainer(Buffer.concat([hex(h), hex('0102')]), 'required');
    expect(withTrailer.version).toBe(0x0102);
  });

  test.each(['none', 'gzip', 'bzip2'] as const)(
    '%s round trip, including 0 and 64 KiB payloads',
    (compression) => {
      for (const data of [
        Buffer.alloc(0),
        Buffer.from('OpenRS2'),
        Buffer.alloc(65536, 7),
        Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) & 0xff)),
      ]) {
        const c = encodeContainer(data, compression, 5);
        const d = decodeContainer(c, 'required');
        expect(d.data.equals(data)).toBe(true);
        expect(d.version).toBe(5);
      }
    },
  );

  test('our bzip2 output is readable by the system bzip2 once BZh1 is prepended', () => {
    const data = Buffer.from('Hello, world! '.repeat(50));
    const c = encodeContainer(data, 'bzip2');
    expect(c.subarray(9, 15).toString('hex')).toBe('314159265359');
    const out = execFileSync('bzip2', ['-dc'], {
      input: Buffer.concat([Buffer.from('BZh1'), c.subarray(9)]),
    });
    expect(out.equals(data)).toBe(true);
  });

  test('gzip header is the plain 10-byte form', () => {
    const c = encodeContainer(Buffer.from('OpenRS2'), 'gzip');
    expect(c.subarray(9, 19).toString('hex')).toBe('1f8b0800000000000000');
  });

  test.each([
    ['gzip', 'gzip'],
    ['bzip2', 'bzip2'],
  ] as const)('%s: data larger than the declared size is rejected (no bomb)', (_n, compression) => {
    const big = encodeContainer(Buffer.alloc(100_000), compression);
    big.writeInt32BE(1000, 5); // declare 1000 bytes
    expect(() => decodeContainer(big, 'none')).toThrow(expect.objectContaining({ code: 'ERR_JS5_OVERFLOW' }));
    const small = encodeContainer(Buffer.alloc(1000), compression);
    small.writeInt32BE(2000, 5);
    expect(() => decodeContainer(small, 'none')).toThrow(
      expect.objectContaining({ code: 'ERR_JS5_UNDERFLOW' }),
    );
  });

  test('lzma: larger declared size than the stream holds fails; huge dictionaries are refused', () => {
    const lz = hex('03 00000011 00000007 5d 00008000 00279c08a70fdffeb3fd3800');
    const under = Buffer.from(lz);
    under.writeInt32BE(9, 5);
    expect(() => decodeContainer(under, 'none')).toThrow(DecodeError);
    const dict = Buffer.from(lz);
    dict.writeUInt32LE(0x7fffffff, 10);
    expect(() => decodeContainer(dict, 'none')).toThrow(
      expect.objectContaining({ code: 'ERR_JS5_BAD_LZMA' }),
    );
  });

  test.each([
    ['unknown type', '04 00000001 00'],
    ['negative length', '00 ffffffff'],
    ['truncated', '00 00000007 4f70'],
    ['negative uncompressed length', '02 00000001 ffffffff 00'],
    ['huge uncompressed length', '02 00000001 7fffffff 00'],
    ['bad gzip magic', '02 0000001b 00000007 1f8c08003ea1585b0203f32f48cd0b0a360200eb0a5f9807000000'],
    ['corrupt bzip2', '01 0000000a 00000007 31415926535900000000'],
    ['3 trailing bytes', '00 00000001 41 000000'],
  ])('rejects %s with a DecodeError', (_n, h) => {
    expect(() => decodeContainer(hex(h), 'optional')).toThrow(DecodeError);
  });

  test('arbitrary bytes → only DecodeError', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 64 }),
          fc.tuple(fc.integer({ min: 0, max: 3 }), fc.uint8Array({ maxLength: 60 })).map(([t, rest]) => {
            const b = Buffer.alloc(9 + rest.length);
            b[0] = t;
            b.writeInt32BE(rest.length, 1);
            b.writeInt32BE(rest.length * 3, 5);
            b.set(rest, 9);
            return new Uint8Array(b);
          }),
        ),
        (bytes) => {
          try {
            decodeContainer(bytes, 'optional');
          } catch (e) {
            expect(e).toBeInstanceOf(DecodeError);
          }
        },
      ),
      { numRuns: 400 },
    );
  });
});

describe('Js5Index', () => {
  // OpenRS2 cache/index/*.dat.
  test('empty and versioned', () => {
    expect(readIndex(hex('05 00 0000'))).toEqual({ protocol: 5, version: 0, flags: 0, groups: [] });
    expect(readIndex(hex('06 12345678 00 0000'))).toEqual({
      protocol: 6,
      version: 0x12345678,
      flags: 0,
      groups: [],
    });
    expect(
      writeIndex({ protocol: 6, version: 0x12345678, flags: 0, groups: [] }).equals(
        hex('06 12345678 00 0000'),
      ),
    ).toBe(true);
    expect(writeIndex({ protocol: 5, version: 0, flags: 0, groups: [] }).equals(hex('05 00 0000'))).toBe(
      true,
    );
  });

  const noFlags =
    '05 00 0003 0000 0001 0002 01234567 89abcdef aaaa5555 00000000 0000000a 00000014 0001 0000 0002 0000 0001 0002';
  test('no-flags: groups 0,1,3 with files {0}, {}, {1,3}', () => {
    const idx = readIndex(hex(noFlags));
    expect(idx.groups.map((g) => g.id)).toEqual([0, 1, 3]);
    expect(idx.groups.map((g) => g.files.map((f) => f.id))).toEqual([[0], [], [1, 3]]);
    expect(idx.groups.map((g) => g.checksum)).toEqual([0x01234567, 0x89abcdef | 0, 0xaaaa5555 | 0]);
    expect(idx.groups.map((g) => g.version)).toEqual([0, 10, 20]);
    expect(writeIndex(idx).equals(hex(noFlags))).toBe(true);
  });

  test('named: "hello"/"world" hashes', () => {
    const named = '05 01 0001 0000 05e918d2 01234567 89abcdef 0001 0000 06c11b92';
    const idx = readIndex(hex(named));
    expect(idx.groups[0]!.nameHash).toBe(nameHash('hello'));
    expect(idx.groups[0]!.files[0]!.nameHash).toBe(nameHash('world'));
    expect(nameHash('hello')).toBe(0x05e918d2);
    expect(writeIndex(idx).equals(hex(named))).toBe(true);
  });

  test('smart (protocol 7) with a group id of 100000', () => {
    const smart =
      '07 00000000 00 0002 0000 800186a0 01234567 aaaa5555 89abcdef 5555aaaa 0002 0000 0000 800186a0';
    const idx = readIndex(hex(smart));
    expect(idx.groups.map((g) => g.id)).toEqual([0, 100000]);
    expect(idx.groups[1]!.files.map((f) => f.id)).toEqual([]);
    expect(idx.groups[0]!.files.map((f) => f.id)).toEqual([0, 100000]);
    expect(writeIndex(idx).equals(hex(smart))).toBe(true);
  });

  test('all flags round trip (fast-check)', () => {
    const group = fc.record({
      nameHash: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
      checksum: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
      version: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
      files: fc.uniqueArray(fc.integer({ min: 0, max: 70000 }), { maxLength: 5 }),
    });
    fc.assert(
      fc.property(
        fc.constantFrom(5, 6, 7),
        fc.integer({ min: 0, max: 15 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 200000 }), { maxLength: 20 }),
        fc.array(group, { minLength: 20, maxLength: 20 }),
        (protocol, flags, ids, gs) => {
          const max = protocol === 7 ? 200000 : 0xffff;
          const sorted = ids.filter((i) => i <= max).sort((a, b) => a - b);
          const index: Js5Index = {
            protocol: protocol as 5 | 6 | 7,
            version: protocol >= 6 ? 42 : 0,
            flags,
            groups: sorted.map((id, i) => {
              const g = gs[i]!;
              return {
                id,
                ...(flags & 1 ? { nameHash: g.nameHash } : {}),
                checksum: g.checksum,
                ...(flags & 8 ? { uncompressedChecksum: g.version } : {}),
                ...(flags & 2 ? { digest: Buffer.alloc(64, i) } : {}),
                ...(flags & 4 ? { length: 5, uncompressedLength: 6 } : {}),
                version: g.version,
                files: g.files
                  .filter((f) => f <= max)
                  .sort((a, b) => a - b)
                  .map((f) => (flags & 1 ? { id: f, nameHash: f * 3 } : { id: f })),
              };
            }),
          };
          expect(readIndex(writeIndex(index))).toEqual(index);
        },
      ),
      { numRuns: 200 },
    );
  });

  test('arbitrary bytes → only DecodeError', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 100 }),
          fc
            .tuple(fc.constantFrom(5, 6, 7), fc.uint8Array({ maxLength: 100 }))
            .map(([p, r]) => new Uint8Array([p, ...r])),
        ),
        (bytes) => {
          try {
            readIndex(bytes);
          } catch (e) {
            expect(e).toBeInstanceOf(DecodeError);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  test('rejects unknown protocols and flags, truncation and trailing bytes', () => {
    for (const h of ['04 00 0000', '08 00 0000', '05 10 0000', '05 00 0001', '05 00 0000 00']) {
      expect(() => readIndex(hex(h))).toThrow(DecodeError);
    }
  });
});

describe('master index', () => {
  test('ORIGINAL and VERSIONED encodings (OpenRS2 inline vectors)', () => {
    const entries = [
      { checksum: 1, version: 0 },
      { checksum: 3, version: 2 },
      { checksum: 5, version: 4 },
    ];
    expect(writeMasterIndex({ format: 'original', entries }).toString('hex')).toBe(
      '000000010000000300000005',
    );
    const versioned = masterIndexContainer({ format: 'versioned', entries });
    expect(versioned.toString('hex')).toBe(
      '00000000180000000100000000000000030000000200000005 00000004'.replace(/\s/g, ''),
    );
    expect(readMasterIndex(versioned.subarray(5), 'versioned').entries).toEqual(entries);
    expect(() => readMasterIndex(Buffer.alloc(7), 'versioned')).toThrow(DecodeError);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 80 }), fc.constantFrom('original', 'versioned'), (b, f) => {
        try {
          readMasterIndex(b, f as 'original');
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
      }),
    );
  });

  test('generated from a store: CRC of the stored index, index version, (0,0) holes; the empty-index CRC', () => {
    const dir = tempDir();
    const store = createStore(dir, 'flat');
    const w = new CacheWriter(store);
    w.index(0, { protocol: 6 });
    w.putGroup(0, 0, Buffer.from('OpenRS2'));
    w.index(2, { protocol: 6 });
    w.putGroup(2, 5, Buffer.from('Hello'), { compression: 'gzip' });
    w.flush();
    const m = createMasterIndex(store, 'versioned');
    expect(m.entries).toHaveLength(3);
    expect(m.entries[1]).toEqual({ checksum: 0, version: 0 });
    expect(m.entries[0]!.version).toBe(1);
    store.write(255, 1, hex('00 00000004 05000000'));
    expect(createMasterIndex(store, 'original').entries[1]!.checksum).toBe(609698396);
  });
});

describe('disk store', () => {
  function writeFiles(dir: string, files: Record<string, Buffer>): void {
    fs.mkdirSync(dir, { recursive: true });
    for (const [name, data] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), data);
  }
  function sector(
    group: number,
    chunk: number,
    next: number,
    archive: number,
    data: Buffer,
    extended = false,
  ): Buffer {
    const h = Buffer.alloc(extended ? 10 : 8);
    if (extended) {
      h.writeUInt32BE(group, 0);
      h.writeUInt16BE(chunk, 4);
      h.writeUIntBE(next, 6, 3);
      h[9] = archive;
    } else {
      h.writeUInt16BE(group, 0);
      h.writeUInt16BE(chunk, 2);
      h.writeUIntBE(next, 4, 3);
      h[7] = archive;
    }
    return Buffer.concat([h, data]);
  }
  const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(520 - b.length)]);

  test('single-block fixture (OpenRS2): idx255 = 000000000000 000007000001', () => {
    const dir = tempDir();
    writeFiles(dir, {
      'main_file_cache.dat2': Buffer.concat([
        Buffer.alloc(520),
        hex('0001 0000 000000 ff'),
        Buffer.from('OpenRS2'),
      ]),
      'main_file_cache.idx255': hex('000000000000 000007000001'),
    });
    const s = DiskStore.open(dir);
    expect(s.list(255)).toEqual([1]);
    expect(s.read(255, 0)).toBeUndefined();
    expect(s.read(255, 1)!.toString()).toBe('OpenRS2');
    expect(s.read(255, 7)).toBeUndefined();
    s.close();
  });

  test('writes the single-block and two-block fixtures byte for byte', () => {
    const dir = tempDir();
    const s = DiskStore.create(dir);
    s.write(255, 1, Buffer.from('OpenRS2'));
    s.close();
    expect(
      fs
        .readFileSync(path.join(dir, 'main_file_cache.dat2'))
        .equals(Buffer.concat([Buffer.alloc(520), hex('0001 0000 000000 ff'), Buffer.from('OpenRS2')])),
    ).toBe(true);
    expect(fs.readFileSync(path.join(dir, 'main_file_cache.idx255')).toString('hex')).toBe(
      '000000000000000007000001',
    );

    const dir2 = tempDir();
    const data = Buffer.from(Array.from({ length: 700 }, (_, i) => i & 0xff));
    const s2 = DiskStore.create(dir2);
    s2.write(255, 1, data);
    s2.close();
    const dat = fs.readFileSync(path.join(dir2, 'main_file_cache.dat2'));
    expect(dat.length).toBe(520 * 2 + 8 + 188);
    expect(dat.subarray(520, 528).toString('hex')).toBe('00010000000002ff');
    expect(dat.subarray(1040, 1048).toString('hex')).toBe('00010001000000ff');
    expect(fs.readFileSync(path.join(dir2, 'main_file_cache.idx255')).subarray(6).toString('hex')).toBe(
      '0002bc000001',
    );
  });

  test('fragmented fixture: two groups interleaved', () => {
    const a = Buffer.alloc(700, 0xaa);
    const b = Buffer.alloc(700, 0xbb);
    const dir = tempDir();
    writeFiles(dir, {
      'main_file_cache.dat2': Buffer.concat([
        Buffer.alloc(520),
        pad(sector(0, 0, 3, 255, a.subarray(0, 512))),
        pad(sector(1, 0, 4, 255, b.subarray(0, 512))),
        pad(sector(0, 1, 0, 255, a.subarray(512))),
        sector(1, 1, 0, 255, b.subarray(512)),
      ]),
      'main_file_cache.idx255': hex('0002bc000001 0002bc000002'),
    });
    const s = DiskStore.open(dir);
    expect(s.read(255, 0)!.equals(a)).toBe(true);
    expect(s.read(255, 1)!.equals(b)).toBe(true);
    s.close();
  });

  test('extended group ids (≥ 65536) use 10-byte headers and round-trip', () => {
    const dir = tempDir();
    const s = DiskStore.create(dir);
    const data = Buffer.from(Array.from({ length: 2000 }, (_, i) => (i * 13) & 0xff));
    s.write(7, 0x1ffff, data);
    s.write(7, 65536, Buffer.from('OpenRS2'));
    s.write(7, 3, Buffer.alloc(1500, 3));
    expect(s.read(7, 0x1ffff)!.equals(data)).toBe(true);
    expect(s.read(7, 65536)!.toString()).toBe('OpenRS2');
    expect(s.read(7, 3)!.equals(Buffer.alloc(1500, 3))).toBe(true);
    expect(s.list(7)).toEqual([3, 65536, 0x1ffff]);
    s.close();
    const dat = fs.readFileSync(path.join(dir, 'main_file_cache.dat2'));
    expect(dat.subarray(520, 530).toString('hex')).toBe('0001ffff000000000207');
    // Overwrite: the group moves to new sectors, the old ones are left.
    const s2 = DiskStore.open(dir, { writable: true });
    s2.write(7, 65536, Buffer.from('changed'));
    expect(s2.read(7, 65536)!.toString()).toBe('changed');
    s2.remove(7, 3);
    expect(s2.exists(7, 3)).toBe(false);
    s2.close();
  });

  test('round trip of many random groups, interleaved writes (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(
            fc.integer({ min: 0, max: 3 }),
            fc.integer({ min: 0, max: 70000 }),
            fc.integer({ min: 0, max: 3000 }),
          ),
          { maxLength: 25 },
        ),
        (ops) => {
          const dir = tempDir();
          const s = DiskStore.create(dir);
          const expected = new Map<string, Buffer>();
          ops.forEach(([a, g, n], i) => {
            const data = Buffer.alloc(n, i + 1);
            s.write(a, g, data);
            expected.set(`${a}/${g}`, data);
          });
          for (const [k, v] of expected) {
            const [a, g] = k.split('/').map(Number);
            expect(s.read(a!, g!)!.equals(v)).toBe(true);
          }
          s.close();
          fs.rmSync(dir, { recursive: true });
        },
      ),
      { numRuns: 25 },
    );
  });

  test.each([
    ['wrong group number', (b: Buffer) => b.writeUInt16BE(9, 520)],
    ['wrong chunk number', (b: Buffer) => b.writeUInt16BE(1, 522)],
    ['wrong archive', (b: Buffer) => (b[527] = 3)],
    ['next sector outside the file', (b: Buffer) => b.writeUIntBE(50, 524, 3)],
    ['next sector 0 before the end', (b: Buffer) => b.writeUIntBE(0, 524, 3)],
  ])('corrupt chain is rejected: %s', (_n, corrupt) => {
    const dir = tempDir();
    const s = DiskStore.create(dir);
    s.write(255, 1, Buffer.alloc(700, 1));
    s.close();
    const p = path.join(dir, 'main_file_cache.dat2');
    const dat = fs.readFileSync(p);
    corrupt(dat);
    fs.writeFileSync(p, dat);
    const r = DiskStore.open(dir);
    expect(() => r.read(255, 1)).toThrow(StoreCorruptError);
    expect(() => r.read(255, 1)).toThrow(expect.objectContaining({ code: 'ERR_JS5_STORE_CORRUPT' }));
    r.close();
  });

  test('truncated data file is rejected', () => {
    const dir = tempDir();
    const s = DiskStore.create(dir);
    s.write(255, 1, Buffer.alloc(700, 1));
    s.close();
    const p = path.join(dir, 'main_file_cache.dat2');
    fs.truncateSync(p, 520 * 2 + 50);
    const r = DiskStore.open(dir);
    expect(() => r.read(255, 1)).toThrow(StoreCorruptError);
    r.close();
  });
});

describe('flat-file store and cache writer', () => {
  test('flat store round trip, including group 65536', () => {
    const dir = tempDir();
    const s = FlatFileStore.create(dir);
    s.write(255, 65536, Buffer.from('OpenRS2'));
    s.write(3, 0, Buffer.from('x'));
    expect(fs.readFileSync(path.join(dir, '255', '65536.dat')).toString()).toBe('OpenRS2');
    expect(s.read(255, 65536)!.toString()).toBe('OpenRS2');
    expect(s.list(255)).toEqual([65536]);
    expect(s.archives()).toEqual([3, 255]);
    expect(s.read(3, 1)).toBeUndefined();
    s.remove(3, 0);
    expect(s.exists(3, 0)).toBe(false);
    expect(openStore(dir).kind).toBe('flat');
  });

  test.each(['disk', 'flat'] as const)(
    'writer bumps versions, writes trailers, and verify passes (%s)',
    (kind) => {
      const dir = tempDir();
      const store = createStore(dir, kind);
      const w = new CacheWriter(store);
      w.index(1, { protocol: 6, flags: 1 });
      w.putGroup(1, 0, Buffer.from('a'), { nameHash: nameHash('a') });
      w.putGroup(1, 0, Buffer.from('b'), { compression: 'gzip' });
      w.putGroup(1, 9, Buffer.alloc(5000, 2), { compression: 'bzip2' });
      w.flush();
      const idx = readArchiveIndex(store, 1)!;
      expect(idx.version).toBe(1);
      expect(idx.groups.map((g) => [g.id, g.version])).toEqual([
        [0, 2],
        [9, 1],
      ]);
      const { version } = splitTrailer(store.read(1, 0)!);
      expect(version).toBe(2);
      expect(verifyCache(store).problems).toEqual([]);
      // A damaged group is reported.
      const bad = Buffer.from(store.read(1, 9)!);
      bad[12]! ^= 1;
      store.write(1, 9, bad);
      const result = verifyCache(store);
      expect(result.problems).toHaveLength(1);
      expect(result.problems[0]).toMatchObject({ archive: 1, group: 9 });
      store.close();
    },
  );
});

describe('name hashes', () => {
  test('ASCII matches Java String.hashCode; CP1252 bytes count as signed; unmappable is "?"', () => {
    expect(nameHash('hello')).toBe(0x05e918d2);
    expect(nameHash('world')).toBe(0x06c11b92);
    expect(nameHash('')).toBe(0);
    // '€' is CP1252 0x80 = -128 as a signed byte; 'é' is 0xe9 = -23.
    expect(nameHash('€')).toBe(-128);
    expect(nameHash('aé')).toBe(97 * 31 - 23);
    expect(nameHash('\u4e00')).toBe(0x3f);
  });
});

describe('disk store overwrites', () => {
  test('an overwrite reuses the old chain, then appends; neighbours stay intact', () => {
    const dir = tempDir();
    const s = DiskStore.create(dir);
    const a = Buffer.alloc(700, 1);
    const b = Buffer.alloc(700, 2);
    s.write(0, 1, a);
    s.write(0, 2, b);
    const dat = path.join(dir, 'main_file_cache.dat2');
    const size = fs.statSync(dat).size;
    s.write(0, 1, Buffer.alloc(690, 3)); // same sector count: in place, no growth
    expect(fs.statSync(dat).size).toBe(size);
    expect(s.read(0, 1)!.equals(Buffer.alloc(690, 3))).toBe(true);
    const big = Buffer.from(Array.from({ length: 3000 }, (_, i) => i & 0xff));
    s.write(0, 1, big); // 2 reused sectors + 4 appended
    expect(fs.statSync(dat).size).toBe(520 * 5 + 520 * 3 + 8 + (3000 - 5 * 512));
    expect(s.read(0, 1)!.equals(big)).toBe(true);
    expect(s.read(0, 2)!.equals(b)).toBe(true);
    s.write(0, 1, Buffer.from('x')); // shrink: first sector reused
    expect(s.read(0, 1)!.toString()).toBe('x');
    expect(s.read(0, 2)!.equals(b)).toBe(true);
    s.close();
  });

  test('a corrupt old chain is not reused', () => {
    const dir = tempDir();
    const s = DiskStore.create(dir);
    s.write(0, 1, Buffer.alloc(700, 1));
    s.close();
    const dat = path.join(dir, 'main_file_cache.dat2');
    const bytes = fs.readFileSync(dat);
    bytes.writeUInt16BE(9, 520); // sector 1 now claims group 9
    fs.writeFileSync(dat, bytes);
    const w = DiskStore.open(dir, { writable: true });
    w.write(0, 1, Buffer.alloc(100, 5));
    expect(w.read(0, 1)!.equals(Buffer.alloc(100, 5))).toBe(true);
    expect(fs.readFileSync(dat).readUInt16BE(520)).toBe(9); // untouched
    w.close();
  });
});

describe('multi-file groups', () => {
  test('one stripe: files, length deltas, stripe count', () => {
    const g = packGroup([Buffer.from('abc'), Buffer.from('de')]);
    expect(g.toString('hex')).toBe(`${Buffer.from('abcde').toString('hex')}00000003ffffffff01`);
    expect(unpackGroup(g, 2).map((b) => b.toString())).toEqual(['abc', 'de']);
    expect(unpackGroup(Buffer.from('solo'), 1)[0]!.toString()).toBe('solo');
  });

  test('two stripes are joined per file', () => {
    // Stripe 1: "ab" "c"; stripe 2: "d" "ef" → files "abd", "cef".
    const g = Buffer.concat([Buffer.from('abcdef'), hex('00000002 ffffffff 00000001 00000001 02')]);
    expect(unpackGroup(g, 2).map((b) => b.toString())).toEqual(['abd', 'cef']);
  });

  test('round trip and arbitrary bytes → only DecodeError', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 50 }), { minLength: 1, maxLength: 6 }), (files) => {
        expect(unpackGroup(packGroup(files), files.length).map((b) => [...b])).toEqual(
          files.map((f) => [...f]),
        );
      }),
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 60 }), fc.integer({ min: 0, max: 5 }), (b, n) => {
        try {
          unpackGroup(Buffer.from(b), n);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe('demo cache', () => {
  test('its multi-file groups unpack into the files its index lists', () => {
    const dir = path.join(tempDir(), 'demo');
    createDemoCache(dir, { kind: 'flat' });
    const store = openStore(dir);
    const idx = readArchiveIndex(store, 2)!;
    const g = idx.groups.find((x) => x.id === 40)!;
    expect(g.files.map((f) => f.id)).toEqual([0, 4, 9]);
    const files = unpackGroup(decodeContainer(store.read(2, 40)!, 'required').data, g.files.length);
    expect(files).toHaveLength(3);
    expect(verifyCache(store).problems).toEqual([]);
    expect(verifyCache(store).groups).toBe(212);
  });
});

describe('master index from a damaged store', () => {
  test('a corrupt index counts as absent, as in OpenRS2', () => {
    const dir = tempDir();
    const store = DiskStore.create(dir);
    const w = new CacheWriter(store);
    for (const a of [0, 1, 2]) {
      w.index(a, { protocol: 6 });
      w.putGroup(a, 0, Buffer.from(`archive ${a}`));
    }
    w.flush();
    // Point idx255's entry for archive 1 at a sector that belongs to another group.
    store.write(255, 1, Buffer.alloc(10));
    const idx255 = path.join(dir, 'main_file_cache.idx255');
    const entries = fs.readFileSync(idx255);
    entries.writeUIntBE(1, 6 + 3, 3);
    fs.writeFileSync(idx255, entries);
    const m = createMasterIndex(DiskStore.open(dir), 'versioned');
    expect(m.entries).toHaveLength(3);
    expect(m.entries[1]).toEqual({ checksum: 0, version: 0 });
    expect(m.entries[2]!.version).toBe(1);
    store.close();
  });
});

describe('DIGESTS master index', () => {
  test('layout: count, (crc, version, whirlpool) per archive, 0x0a + whirlpool of everything before', () => {
    const entries = [
      { checksum: 1, version: 2, digest: Buffer.alloc(64, 0xaa) },
      { checksum: -1, version: 3, digest: Buffer.alloc(64, 0x55) },
    ];
    const bytes = writeMasterIndex({ format: 'digests', entries });
    expect(bytes.length).toBe(1 + 2 * 72 + 65);
    expect(bytes[0]).toBe(2);
    expect(bytes.subarray(1, 9).toString('hex')).toBe('0000000100000002');
    expect(bytes[145]).toBe(0x0a);
    expect(bytes.subarray(146).equals(whirlpool(bytes.subarray(0, 145)))).toBe(true);
    expect(readMasterIndex(bytes, 'digests').entries).toEqual(entries);
    const tampered = Buffer.from(bytes);
    tampered[5]! ^= 1;
    expect(() => readMasterIndex(tampered, 'digests')).toThrow(
      expect.objectContaining({ code: 'ERR_JS5_BAD_SIGNATURE' }),
    );
    expect(() => readMasterIndex(bytes.subarray(0, 100), 'digests')).toThrow(DecodeError);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (b) => {
        try {
          readMasterIndex(b, 'digests');
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
      }),
    );
  });

  test('generated from a store: the digest is the whirlpool of the stored index container', () => {
    const dir = tempDir();
    const store = createStore(dir, 'flat');
    const w = new CacheWriter(store);
    w.index(1, { protocol: 6 });
    w.putGroup(1, 0, Buffer.from('OpenRS2'));
    w.flush();
    const m = createMasterIndex(store, 'digests');
    expect(m.entries[0]).toEqual({ checksum: 0, version: 0, digest: Buffer.alloc(64) });
    expect(m.entries[1]!.digest!.equals(whirlpool(store.read(255, 1)!))).toBe(true);
  });
});

describe('writer with every index flag', () => {
  test('fills digests, uncompressed CRCs and lengths', () => {
    const store = createStore(tempDir(), 'flat');
    const w = new CacheWriter(store);
    w.index(3, { protocol: 7, flags: 0x0f });
    const data = Buffer.from('Hello, world! '.repeat(20));
    w.putGroup(3, 70_000, data, { compression: 'gzip', nameHash: nameHash('hello') });
    w.flush();
    const g = readArchiveIndex(store, 3)!.groups[0]!;
    const stored = store.read(3, 70_000)!;
    const { container } = splitTrailer(stored);
    expect(g.id).toBe(70_000);
    expect(g.digest!.equals(whirlpool(container))).toBe(true);
    expect(g.uncompressedChecksum).toBe(zlib.crc32(data) | 0);
    expect(g.length).toBe(container.length);
    expect(g.uncompressedLength).toBe(data.length);
    expect(verifyCache(store).problems).toEqual([]);
  });
});
