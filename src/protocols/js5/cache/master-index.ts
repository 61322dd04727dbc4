/**
 * The master index (group 255/255), generated from the store and served as a type-0 container
 * (docs/js5.md, "Master index"). ORIGINAL = `crc` per archive (435); VERSIONED = `crc, version` per archive
 * (530, 550, OSRS); DIGESTS = `u8 count`, `crc, version, whirlpool[64]` per archive, then an
 * unsigned "signature" `0x0a ‖ whirlpool(everything before it)` (later RS2; RSA signing and the
 * RS3 LENGTHS format are not done).
 */

import { DecodeError, ErrorCode } from '../../../wire/errors.js';
import { WireReader } from '../../../wire/reader.js';
import { Js5Error } from '../errors.js';
import { crc32 } from './crc.js';
import { type IndexState, readIndexStates } from './scan.js';
import type { Store } from './store.js';

export { crc32 } from './crc.js';

import { whirlpool } from './whirlpool.js';

export type MasterIndexFormat = 'original' | 'versioned' | 'digests';
export const MASTER_INDEX_FORMATS: readonly MasterIndexFormat[] = ['original', 'versioned', 'digests'];

export interface MasterIndexEntry {
  /** CRC32 of the stored index container (signed, as clients compare it). */
  checksum: number;
  version: number;
  /** Whirlpool of the stored index container (DIGESTS only; zeros when absent). */
  digest?: Buffer;
}

/** Magic byte that starts the DIGESTS signature block (OpenRS2 `Rsa.MAGIC`). */
const SIGNATURE_MAGIC = 0x0a;

export interface MasterIndex {
  format: MasterIndexFormat;
  entries: MasterIndexEntry[];
}

/** Encodes the payload (no container header). */
export function writeMasterIndex(index: MasterIndex): Buffer {
  if (index.format === 'digests') {
    if (index.entries.length > 255)
      throw new Js5Error('ERR_JS5_BAD_ARGUMENT', 'DIGESTS holds at most 255 archives');
    const body = Buffer.alloc(1 + index.entries.length * 72);
    body[0] = index.entries.length;
    index.entries.forEach((e, i) => {
      const o = 1 + i * 72;
      body.writeInt32BE(e.checksum | 0, o);
      body.writeInt32BE(e.version | 0, o + 4);
      if (e.digest !== undefined) e.digest.copy(body, o + 8, 0, 64);
    });
    return Buffer.concat([body, Buffer.of(SIGNATURE_MAGIC), whirlpool(body)]);
  }
  const width = index.format === 'original' ? 4 : 8;
  const out = Buffer.alloc(index.entries.length * width);
  index.entries.forEach((e, i) => {
    out.writeInt32BE(e.checksum | 0, i * width);
    if (width === 8) out.writeInt32BE(e.version | 0, i * width + 4);
  });
  return out;
}

/** Decodes a payload (no container header). Throws DecodeError only. */
export function readMasterIndex(bytes: Uint8Array, format: MasterIndexFormat): MasterIndex {
  if (format === 'digests') return readDigests(bytes);
  const width = format === 'original' ? 4 : 8;
  if (bytes.length % width !== 0) {
    throw new DecodeError(
      ErrorCode.BAD_LENGTH,
      `${format} master index length ${bytes.length} is not a multiple of ${width}`,
      0,
    );
  }
  if (bytes.length / width > 256) throw new DecodeError(ErrorCode.TOO_LARGE, 'more than 256 archives', 0);
  const r = new WireReader(bytes);
  const entries: MasterIndexEntry[] = [];
  while (r.remaining > 0) entries.push({ checksum: r.i32be(), version: width === 8 ? r.i32be() : 0 });
  return { format, entries };
}

function readDigests(bytes: Uint8Array): MasterIndex {
  const r = new WireReader(bytes);
  const count = r.u8();
  const entries: MasterIndexEntry[] = [];
  for (let i = 0; i < count; i++) {
    const checksum = r.i32be();
    const version = r.i32be();
    entries.push({ checksum, version, digest: Buffer.from(r.bytes(64)) });
  }
  const end = r.offset;
  // Only the unsigned form can be checked: an RSA-signed block needs the server's public key.
  const magicAt = r.offset;
  if (r.u8() !== SIGNATURE_MAGIC) {
    throw new DecodeError(
      'ERR_JS5_BAD_SIGNATURE',
      'signature block does not start with 0x0a (RSA-signed?)',
      magicAt,
    );
  }
  const expected = r.bytes(64);
  r.expectEnd('master index');
  if (!whirlpool(Buffer.from(bytes.buffer, bytes.byteOffset, end)).equals(expected)) {
    throw new DecodeError(
      'ERR_JS5_BAD_SIGNATURE',
      'whirlpool of the master index does not match its signature',
      magicAt,
    );
  }
  return { format: 'digests', entries };
}

/** The type-0 container holding a master index payload (what 255/255 serves). */
export function masterIndexContainer(index: MasterIndex): Buffer {
  const payload = writeMasterIndex(index);
  const out = Buffer.allocUnsafe(5 + payload.length);
  out[0] = 0;
  out.writeInt32BE(payload.length, 1);
  payload.copy(out, 5);
  return out;
}

/**
 * Builds the master index from a store: for each archive 0..max, the CRC of its stored index
 * container and the index's own version. An index the store cannot read (a broken chain: clients
 * never remove unused indexes from idx255, so they break when the dat2 is truncated) counts as
 * absent, as in OpenRS2; absent archives below the max are (0, 0). An index that reads but does
 * not decode still has stored bytes: its entry is their CRC (what a client checks what it
 * downloads against), with version 0, since the version is inside what does not decode.
 */
export function createMasterIndex(store: Store, format: MasterIndexFormat): MasterIndex {
  return masterIndexFrom(readIndexStates(store).states, format);
}

/** The master index of already-read index states (see `createMasterIndex`). */
export function masterIndexFrom(states: readonly IndexState[], format: MasterIndexFormat): MasterIndex {
  const entries: MasterIndexEntry[] = [];
  for (const state of states) {
    const stored = state.stored;
    if (stored === undefined) continue;
    while (entries.length < state.archive)
      entries.push(
        format === 'digests'
          ? { checksum: 0, version: 0, digest: Buffer.alloc(64) }
          : { checksum: 0, version: 0 },
      );
    const entry: MasterIndexEntry = { checksum: crc32(stored), version: state.index?.version ?? 0 };
    if (format === 'digests') entry.digest = whirlpool(stored);
    entries.push(entry);
  }
  return { format, entries };
}
