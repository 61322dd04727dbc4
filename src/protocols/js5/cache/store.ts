/**
 * Cache stores (docs/js5.md, "Cache on disk"): the disk store (`main_file_cache.dat2` + `idx0`…`idx255`, 520-byte
 * sectors) and the flat-file store (`<archive>/<group>.dat`). Both hold each group exactly as
 * stored: container + version trailer for archives 0–254, container only for 255.
 *
 * Store I/O is synchronous and positional (pread/pwrite): groups are small and the server reads
 * through a bounded in-memory cache, so a read never holds the event loop for long.
 */
import fs from 'node:fs';
import path from 'node:path';
import { DecodeError } from '../../../wire/errors.js';
import { Js5Error } from '../errors.js';

export interface Store {
  readonly kind: 'disk' | 'flat';
  readonly dir: string;
  /** Archives that have a store of their own (idx files, or folders), 255 included. */
  archives(): number[];
  /** Group ids present in an archive, ascending. */
  list(archive: number): number[];
  exists(archive: number, group: number): boolean;
  /**
   * The stored bytes, or undefined when the group is absent. Throws StoreCorruptError. With
   * `into` (large enough), the bytes are read into it and a view of it is returned: no allocation.
   */
  read(archive: number, group: number, into?: Buffer): Buffer | undefined;
  write(archive: number, group: number, data: Uint8Array): void;
  remove(archive: number, group: number): void;
  close(): void;
}

/** A damaged store: broken sector chain, bad headers, truncated files. */
export class StoreCorruptError extends DecodeError {
  readonly archive: number;
  readonly group: number;
  constructor(archive: number, group: number, detail: string, offset = 0, code = 'ERR_JS5_STORE_CORRUPT') {
    super(code, `archive ${archive} group ${group}: ${detail}`, offset);
    this.archive = archive;
    this.group = group;
  }
}

/**
 * A group file that exists but cannot be read (EACCES, EISDIR, EIO…): `ERR_JS5_STORE_READ`.
 * A subclass of StoreCorruptError, so whatever treats a corrupt group as absent does so here too.
 */
export class StoreReadError extends StoreCorruptError {
  readonly errno: string | undefined;
  constructor(archive: number, group: number, cause: unknown) {
    const errno = (cause as { code?: string } | undefined)?.code;
    super(
      archive,
      group,
      `cannot read: ${cause instanceof Error ? cause.message : String(cause)}`,
      0,
      'ERR_JS5_STORE_READ',
    );
    this.errno = errno;
  }
}

export const SECTOR_SIZE = 520;
const HEADER = 8;
const EXTENDED_HEADER = 10;
const MAX_SECTOR = 0xff_ffff;
const MAX_GROUP_SIZE = 0xff_ffff;
const INDEX_ENTRY = 6;

function checkIds(archive: number, group: number): void {
  if (!Number.isInteger(archive) || archive < 0 || archive > 255)
    throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `archive ${archive} out of range`);
  if (!Number.isInteger(group) || group < 0 || group > 0x7fff_ffff)
    throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `group ${group} out of range`);
}

function preadFully(fd: number, buf: Buffer, position: number): number {
  let done = 0;
  while (done < buf.length) {
    const n = fs.readSync(fd, buf, done, buf.length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

function pwriteFully(fd: number, buf: Buffer, position: number): void {
  let done = 0;
  while (done < buf.length) done += fs.writeSync(fd, buf, done, buf.length - done, position + done);
}

export class DiskStore implements Store {
  readonly kind = 'disk' as const;
  readonly dir: string;
  private readonly writable: boolean;
  private datFd: number;
  private datLength: number;
  private readonly idxFds = new Map<number, number>();
  private readonly sector = Buffer.allocUnsafe(SECTOR_SIZE);
  private readonly scratch = Buffer.allocUnsafe(SECTOR_SIZE * 128);

  private constructor(dir: string, writable: boolean) {
    this.dir = dir;
    this.writable = writable;
    const dat = path.join(dir, 'main_file_cache.dat2');
    this.datFd = fs.openSync(dat, writable ? (fs.existsSync(dat) ? 'r+' : 'w+') : 'r');
    this.datLength = fs.fstatSync(this.datFd).size;
  }

  static open(dir: string, options: { writable?: boolean } = {}): DiskStore {
    return new DiskStore(dir, options.writable ?? false);
  }

  static create(dir: string): DiskStore {
    fs.mkdirSync(dir, { recursive: true });
    return new DiskStore(dir, true);
  }

  private idxPath(archive: number): string {
    return path.join(this.dir, `main_file_cache.idx${archive}`);
  }

  private idxFd(archive: number, create: boolean): number | undefined {
    let fd = this.idxFds.get(archive);
    if (fd !== undefined) return fd;
    const p = this.idxPath(archive);
    if (!fs.existsSync(p)) {
      if (!create) return undefined;
      fd = fs.openSync(p, 'w+');
    } else fd = fs.openSync(p, this.writable ? 'r+' : 'r');
    this.idxFds.set(archive, fd);
    return fd;
  }

  archives(): number[] {
    const out: number[] = [];
    for (const f of fs.readdirSync(this.dir)) {
      const m = /^main_file_cache\.idx(\d{1,3})$/.exec(f);
      if (m !== null && Number(m[1]) <= 255) out.push(Number(m[1]));
    }
    return out.sort((a, b) => a - b);
  }

  list(archive: number): number[] {
    const fd = this.idxFd(archive, false);
    if (fd === undefined) return [];
    const size = fs.fstatSync(fd).size;
    const buf = Buffer.allocUnsafe(size - (size % INDEX_ENTRY));
    preadFully(fd, buf, 0);
    const out: number[] = [];
    for (let o = 0; o + INDEX_ENTRY <= buf.length; o += INDEX_ENTRY) {
      if (buf.readUIntBE(o + 3, 3) !== 0) out.push(o / INDEX_ENTRY);
    }
    return out;
  }

  private entry(archive: number, group: number): { size: number; sector: number } | undefined {
    checkIds(archive, group);
    const fd = this.idxFd(archive, false);
    if (fd === undefined) return undefined;
    const buf = this.sector.subarray(0, INDEX_ENTRY);
    if (preadFully(fd, buf, group * INDEX_ENTRY) < INDEX_ENTRY) return undefined;
    const sector = buf.readUIntBE(3, 3);
    if (sector === 0) return undefined;
    return { size: buf.readUIntBE(0, 3), sector };
  }

  exists(archive: number, group: number): boolean {
    return this.entry(archive, group) !== undefined;
  }

  read(archive: number, group: number, into?: Buffer): Buffer | undefined {
    const e = this.entry(archive, group);
    if (e === undefined) return undefined;
    const extended = group > 0xffff;
    const headerSize = extended ? EXTENDED_HEADER : HEADER;
    const perSector = SECTOR_SIZE - headerSize;
    // Before allocating e.size bytes (up to 16 MiB, from the idx file): the chain's sectors are
    // distinct, so the dat2 must hold at least that many of them, and the first one must fit.
    const sectors = Math.ceil(e.size / perSector);
    const lastBytes = e.size - (sectors - 1) * perSector;
    if (
      e.size > 0 &&
      (e.sector * SECTOR_SIZE + headerSize + Math.min(perSector, e.size) > this.datLength ||
        (sectors - 1) * SECTOR_SIZE + headerSize + lastBytes > this.datLength)
    ) {
      throw new StoreCorruptError(
        archive,
        group,
        `${e.size} bytes in ${sectors} sectors cannot fit in a data file of ${this.datLength} bytes`,
      );
    }
    const out =
      into !== undefined && into.length >= e.size ? into.subarray(0, e.size) : Buffer.allocUnsafe(e.size);
    let off = 0;
    let num = e.sector;
    let chunk = 0;
    // Sectors of a group are usually consecutive: read ahead up to 128 of them per syscall.
    const scratch = this.scratch;
    let first = -1;
    let filled = 0;
    while (off < e.size) {
      if (num === 0)
        throw new StoreCorruptError(archive, group, `chain ends after ${off} of ${e.size} bytes`);
      const pos = num * SECTOR_SIZE;
      const n = Math.min(perSector, e.size - off);
      if (pos + headerSize + n > this.datLength) {
        throw new StoreCorruptError(archive, group, `sector ${num} lies outside the data file`, pos);
      }
      let rel = (num - first) * SECTOR_SIZE;
      if (first < 0 || num < first || rel + headerSize + n > filled) {
        const sectorsLeft = Math.ceil((e.size - off) / perSector);
        const want = Math.min(scratch.length, sectorsLeft * SECTOR_SIZE, this.datLength - pos);
        filled = preadFully(this.datFd, scratch.subarray(0, want), pos);
        first = num;
        rel = 0;
        if (filled < headerSize + n)
          throw new StoreCorruptError(archive, group, `data file ends inside sector ${num}`, pos);
      }
      const g = extended ? scratch.readUInt32BE(rel) : scratch.readUInt16BE(rel);
      const c = scratch.readUInt16BE(rel + (extended ? 4 : 2));
      const next = scratch.readUIntBE(rel + (extended ? 6 : 4), 3);
      const a = scratch[rel + (extended ? 9 : 7)]!;
      if (g !== group)
        throw new StoreCorruptError(archive, group, `sector ${num} belongs to group ${g}`, pos);
      if (c !== (chunk & 0xffff))
        throw new StoreCorruptError(archive, group, `sector ${num} is chunk ${c}, expected ${chunk}`, pos);
      if (a !== archive)
        throw new StoreCorruptError(archive, group, `sector ${num} belongs to archive ${a}`, pos);
      scratch.copy(out, off, rel + headerSize, rel + headerSize + n);
      off += n;
      chunk++;
      num = next;
    }
    return out;
  }

  /** Sectors of the group's current chain, in order, while their headers check out (≤ `max`). */
  private reusableChain(archive: number, group: number, max: number): number[] {
    const e = this.entry(archive, group);
    if (e === undefined) return [];
    const extended = group > 0xffff;
    const headerSize = extended ? EXTENDED_HEADER : HEADER;
    const header = this.sector.subarray(0, headerSize);
    const nums: number[] = [];
    const seen = new Set<number>();
    let num = e.sector;
    while (nums.length < max && num !== 0 && !seen.has(num)) {
      const pos = num * SECTOR_SIZE;
      if (pos + headerSize > this.datLength || preadFully(this.datFd, header, pos) < headerSize) break;
      const g = extended ? header.readUInt32BE(0) : header.readUInt16BE(0);
      const c = header.readUInt16BE(extended ? 4 : 2);
      const a = header[extended ? 9 : 7];
      if (g !== group || c !== (nums.length & 0xffff) || a !== archive) break;
      nums.push(num);
      seen.add(num);
      num = header.readUIntBE(extended ? 6 : 4, 3);
    }
    return nums;
  }

  /**
   * Writes a group. Like OpenRS2, the group's old chain is reused while its headers check out,
   * then new sectors are appended at the end of the data file (whose last sector is not padded).
   */
  write(archive: number, group: number, data: Uint8Array): void {
    checkIds(archive, group);
    if (!this.writable)
      throw new Js5Error('ERR_JS5_READ_ONLY', `the cache in ${this.dir} was opened read-only`);
    if (data.length > MAX_GROUP_SIZE)
      throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `group of ${data.length} bytes exceeds ${MAX_GROUP_SIZE}`);
    const extended = group > 0xffff;
    const headerSize = extended ? EXTENDED_HEADER : HEADER;
    const perSector = SECTOR_SIZE - headerSize;
    const count = Math.max(1, Math.ceil(data.length / perSector));
    const nums = this.reusableChain(archive, group, count);
    let append = Math.max(1, Math.ceil(this.datLength / SECTOR_SIZE));
    while (nums.length < count) nums.push(append++);
    if (append - 1 > MAX_SECTOR)
      throw new Js5Error('ERR_JS5_BAD_ARGUMENT', 'data file is full (2^24 sectors)');
    // Write runs of consecutive sectors with one syscall each.
    let i = 0;
    while (i < count) {
      let j = i + 1;
      while (j < count && nums[j] === nums[j - 1]! + 1) j++;
      const last = j === count;
      const out = Buffer.alloc(
        (j - i) * SECTOR_SIZE - (last ? perSector - (data.length - (count - 1) * perSector) : 0),
      );
      for (let k = i; k < j; k++) {
        const o = (k - i) * SECTOR_SIZE;
        const next = k === count - 1 ? 0 : nums[k + 1]!;
        if (extended) {
          out.writeUInt32BE(group, o);
          out.writeUInt16BE(k & 0xffff, o + 4);
          out.writeUIntBE(next, o + 6, 3);
          out[o + 9] = archive;
        } else {
          out.writeUInt16BE(group, o);
          out.writeUInt16BE(k & 0xffff, o + 2);
          out.writeUIntBE(next, o + 4, 3);
          out[o + 7] = archive;
        }
        out.set(data.subarray(k * perSector, Math.min(data.length, (k + 1) * perSector)), o + headerSize);
      }
      const pos = nums[i]! * SECTOR_SIZE;
      pwriteFully(this.datFd, out, pos);
      this.datLength = Math.max(this.datLength, pos + out.length);
      i = j;
    }
    const entry = Buffer.allocUnsafe(INDEX_ENTRY);
    entry.writeUIntBE(data.length, 0, 3);
    entry.writeUIntBE(nums[0]!, 3, 3);
    pwriteFully(this.idxFd(archive, true)!, entry, group * INDEX_ENTRY);
  }

  remove(archive: number, group: number): void {
    checkIds(archive, group);
    const fd = this.idxFd(archive, false);
    if (fd === undefined || fs.fstatSync(fd).size < (group + 1) * INDEX_ENTRY) return;
    pwriteFully(fd, Buffer.alloc(INDEX_ENTRY), group * INDEX_ENTRY);
  }

  close(): void {
    for (const fd of this.idxFds.values()) fs.closeSync(fd);
    this.idxFds.clear();
    if (this.datFd >= 0) fs.closeSync(this.datFd);
    this.datFd = -1;
  }
}

export class FlatFileStore implements Store {
  readonly kind = 'flat' as const;
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  static create(dir: string): FlatFileStore {
    fs.mkdirSync(dir, { recursive: true });
    return new FlatFileStore(dir);
  }

  private file(archive: number, group: number): string {
    checkIds(archive, group);
    return path.join(this.dir, String(archive), `${group}.dat`);
  }

  archives(): number[] {
    return fs
      .readdirSync(this.dir)
      .filter((f) => /^\d{1,3}$/.test(f) && Number(f) <= 255)
      .map(Number)
      .sort((a, b) => a - b);
  }

  list(archive: number): number[] {
    const dir = path.join(this.dir, String(archive));
    if (!fs.existsSync(dir)) return [];
    return fs
      .readdirSync(dir)
      .map((f) => /^(\d{1,10})\.dat$/.exec(f))
      .filter((m) => m !== null && Number(m[1]) <= 0x7fff_ffff)
      .map((m) => Number(m![1]))
      .sort((a, b) => a - b);
  }

  exists(archive: number, group: number): boolean {
    return fs.existsSync(this.file(archive, group));
  }

  read(archive: number, group: number, into?: Buffer): Buffer | undefined {
    const f = this.file(archive, group);
    let fd: number;
    try {
      fd = fs.openSync(f, 'r');
    } catch (e) {
      if ((e as { code?: string }).code === 'ENOENT') return undefined;
      throw new StoreReadError(archive, group, e);
    }
    try {
      // Size first: nothing is allocated for a file that cannot be a group.
      const st = fs.fstatSync(fd);
      if (!st.isFile()) throw new StoreCorruptError(archive, group, `${f} is not a regular file`);
      if (st.size > MAX_GROUP_SIZE)
        throw new StoreCorruptError(archive, group, `file of ${st.size} bytes is too large`);
      const out =
        into !== undefined && into.length >= st.size
          ? into.subarray(0, st.size)
          : Buffer.allocUnsafe(st.size);
      const n = preadFully(fd, out, 0);
      if (n < st.size) throw new StoreCorruptError(archive, group, `file shrank to ${n} bytes while read`);
      return out;
    } catch (e) {
      if (e instanceof StoreCorruptError) throw e;
      throw new StoreReadError(archive, group, e);
    } finally {
      fs.closeSync(fd);
    }
  }

  write(archive: number, group: number, data: Uint8Array): void {
    const f = this.file(archive, group);
    fs.mkdirSync(path.dirname(f), { recursive: true });
    // Write then rename, so a crash never leaves a half-written group behind.
    const tmp = `${f}.tmp`;
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, f);
  }

  remove(archive: number, group: number): void {
    fs.rmSync(this.file(archive, group), { force: true });
  }

  close(): void {}
}

/** Opens the store in `dir`: a disk store if `main_file_cache.dat2` exists, else flat files. */
export function openStore(dir: string, options: { writable?: boolean } = {}): Store {
  if (!fs.existsSync(dir))
    throw new Js5Error('ERR_JS5_NO_CACHE', `no cache at ${dir}: the folder does not exist`);
  if (fs.existsSync(path.join(dir, 'main_file_cache.dat2'))) return DiskStore.open(dir, options);
  return new FlatFileStore(dir);
}

/** Creates (or opens for writing) a store of the given kind. */
export function createStore(dir: string, kind: 'disk' | 'flat'): Store {
  if (kind === 'disk') {
    fs.mkdirSync(dir, { recursive: true });
    return fs.existsSync(path.join(dir, 'main_file_cache.dat2'))
      ? DiskStore.open(dir, { writable: true })
      : DiskStore.create(dir);
  }
  return FlatFileStore.create(dir);
}
