/**
 * Js5Index (a.k.a. reference table), the uncompressed payload of group 255/N (docs/js5.md, "Js5Index"):
 * protocols 5 (ORIGINAL), 6 (VERSIONED), 7 (SMART); flags for names, digests, lengths and
 * uncompressed CRCs. Column order is the one every client reads; ids are delta-coded.
 */

import { DecodeError, ErrorCode } from '../../../wire/errors.js';
import { WireReader } from '../../../wire/reader.js';
import { WireWriter } from '../../../wire/writer.js';
import { Js5Error } from '../errors.js';

export const IndexProtocol = { original: 5, versioned: 6, smart: 7 } as const;
export const IndexFlags = { names: 0x01, digests: 0x02, lengths: 0x04, uncompressedChecksums: 0x08 } as const;

export interface Js5File {
  id: number;
  nameHash?: number;
}

export interface Js5Group {
  id: number;
  nameHash?: number;
  /** CRC32 of the stored container without its trailer (signed 32-bit, as Java stores it). */
  checksum: number;
  uncompressedChecksum?: number;
  /** 64-byte whirlpool digest (flag 0x02). */
  digest?: Buffer;
  length?: number;
  uncompressedLength?: number;
  version: number;
  files: Js5File[];
}

export interface Js5Index {
  protocol: 5 | 6 | 7;
  /** Index version (protocol ≥ 6; 0 for protocol 5). */
  version: number;
  flags: number;
  groups: Js5Group[];
}

/** Most groups, or files per group, accepted when reading. */
export const MAX_INDEX_ENTRIES = 1 << 20;

/** Code points of CP1252 bytes 0x80–0x9F (0 where CP1252 leaves the byte undefined). */
const CP1252_HIGH = [
  0x20ac, 0, 0x201a, 0x0192, 0x201e, 0x2026, 0x2020, 0x2021, 0x02c6, 0x2030, 0x0160, 0x2039, 0x0152, 0,
  0x017d, 0, 0, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014, 0x02dc, 0x2122, 0x0161, 0x203a,
  0x0153, 0, 0x017e, 0x0178,
];

function cp1252(c: number): number {
  if (c > 0 && c < 0x80) return c;
  if (c >= 0xa0 && c <= 0xff) return c;
  const i = CP1252_HIGH.indexOf(c);
  return i > 0 || (i === 0 && c !== 0) ? 0x80 + i : 0x3f; // unmappable (and NUL) → '?'
}

/**
 * The name hash of Js5Index entries: Java `String.hashCode` over the name's CP1252 bytes taken
 * as signed bytes (OpenRS2 `krHashCode`); unmappable characters count as '?'.
 */
export function nameHash(name: string): number {
  let h = 0;
  for (let i = 0; i < name.length; i++)
    h = (Math.imul(h, 31) + ((cp1252(name.charCodeAt(i)) << 24) >> 24)) | 0;
  return h;
}

/** RuneScape "big smart": u16 if < 0x8000, else i32 with the top bit set. */
export function readBigSmart(r: WireReader): number {
  if ((r.peekU8() & 0x80) === 0) return r.u16be();
  return r.u32be() & 0x7fff_ffff;
}

export function writeBigSmart(w: WireWriter, v: number): void {
  if (v < 0 || v > 0x7fff_ffff) throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `smart value ${v} out of range`);
  if (v < 0x8000) w.u16be(v);
  else w.u32be((v | 0x8000_0000) >>> 0);
}

function readCount(r: WireReader, protocol: number): number {
  const at = r.offset;
  const n = protocol >= 7 ? readBigSmart(r) : r.u16be();
  if (n > MAX_INDEX_ENTRIES)
    throw new DecodeError(ErrorCode.TOO_LARGE, `count ${n} exceeds ${MAX_INDEX_ENTRIES}`, at);
  return n;
}

function readIds(r: WireReader, protocol: number, count: number, what: string): number[] {
  // Each delta takes at least 2 bytes: reject counts the input cannot hold before allocating.
  if (count * 2 > r.remaining) r.fail(count * 2, what);
  const ids = new Array<number>(count);
  let id = 0;
  for (let i = 0; i < count; i++) {
    const at = r.offset;
    id += protocol >= 7 ? readBigSmart(r) : r.u16be();
    if (i > 0 && id === ids[i - 1])
      throw new DecodeError(ErrorCode.BAD_VALUE, `duplicate ${what} id ${id}`, at);
    if (id > 0x7fff_ffff) throw new DecodeError(ErrorCode.BAD_VALUE, `${what} id ${id} out of range`, at);
    ids[i] = id;
  }
  return ids;
}

/** Decodes an index payload (already decompressed). Throws DecodeError only. */
export function readIndex(bytes: Uint8Array): Js5Index {
  const r = new WireReader(bytes);
  const protocolAt = r.offset;
  const protocol = r.u8();
  if (protocol < 5 || protocol > 7) {
    throw new DecodeError('ERR_JS5_BAD_INDEX_PROTOCOL', `unsupported index protocol ${protocol}`, protocolAt);
  }
  const version = protocol >= 6 ? r.i32be() : 0;
  const flagsAt = r.offset;
  const flags = r.u8();
  if ((flags & ~0x0f) !== 0)
    throw new DecodeError(ErrorCode.BAD_VALUE, `unknown index flags 0x${flags.toString(16)}`, flagsAt);
  const count = readCount(r, protocol);
  const ids = readIds(r, protocol, count, 'group');
  const groups: Js5Group[] = ids.map((id) => ({ id, checksum: 0, version: 0, files: [] }));
  if (flags & IndexFlags.names) for (const g of groups) g.nameHash = r.i32be();
  for (const g of groups) g.checksum = r.i32be();
  if (flags & IndexFlags.uncompressedChecksums) for (const g of groups) g.uncompressedChecksum = r.i32be();
  if (flags & IndexFlags.digests) for (const g of groups) g.digest = Buffer.from(r.bytes(64));
  if (flags & IndexFlags.lengths) {
    for (const g of groups) {
      g.length = r.i32be();
      g.uncompressedLength = r.i32be();
    }
  }
  for (const g of groups) g.version = r.i32be();
  const fileCounts = groups.map(() => readCount(r, protocol));
  groups.forEach((g, i) => {
    g.files = readIds(r, protocol, fileCounts[i]!, 'file').map((id) => ({ id }));
  });
  if (flags & IndexFlags.names) for (const g of groups) for (const f of g.files) f.nameHash = r.i32be();
  r.expectEnd('index');
  return { protocol: protocol as 5 | 6 | 7, version, flags, groups };
}

/** Encodes an index payload. Groups and files must be sorted by id. */
export function writeIndex(index: Js5Index, w = new WireWriter()): Buffer {
  const { protocol, flags, groups } = index;
  const smart = protocol >= 7;
  const count = (n: number) => (smart ? writeBigSmart(w, n) : w.u16be(n));
  const maxId = smart ? 0x7fff_ffff : 0xffff;
  w.reset();
  w.u8(protocol);
  if (protocol >= 6) w.i32be(index.version);
  w.u8(flags);
  count(groups.length);
  let prev = 0;
  for (let i = 0; i < groups.length; i++) {
    const id = groups[i]!.id;
    if (id > maxId || (i > 0 && id <= prev))
      throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `group ids must be increasing and ≤ ${maxId}`);
    count(id - (i === 0 ? 0 : prev));
    prev = id;
  }
  if (flags & IndexFlags.names) for (const g of groups) w.i32be(g.nameHash ?? 0);
  for (const g of groups) w.i32be(g.checksum);
  if (flags & IndexFlags.uncompressedChecksums) for (const g of groups) w.i32be(g.uncompressedChecksum ?? 0);
  if (flags & IndexFlags.digests) for (const g of groups) w.bytes(g.digest ?? Buffer.alloc(64));
  if (flags & IndexFlags.lengths) {
    for (const g of groups) {
      w.i32be(g.length ?? 0);
      w.i32be(g.uncompressedLength ?? 0);
    }
  }
  for (const g of groups) w.i32be(g.version);
  for (const g of groups) count(g.files.length);
  for (const g of groups) {
    let p = 0;
    for (let i = 0; i < g.files.length; i++) {
      const id = g.files[i]!.id;
      if (id > maxId || (i > 0 && id <= p))
        throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `file ids must be increasing and ≤ ${maxId}`);
      count(id - (i === 0 ? 0 : p));
      p = id;
    }
  }
  if (flags & IndexFlags.names) for (const g of groups) for (const f of g.files) w.i32be(f.nameHash ?? 0);
  return w.toBuffer();
}
