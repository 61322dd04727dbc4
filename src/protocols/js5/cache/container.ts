/**
 * JS5 containers (docs/js5.md, "Containers"): `type u8, length i32, [uncompressedLength i32 if type != 0], data`,
 * stored on disk with a u16 version trailer for archives 0–254 (docs/js5.md, "Version trailer").
 */

import { DecodeError, ErrorCode } from '../../../wire/errors.js';
import { WireReader } from '../../../wire/reader.js';
import { Js5Error } from '../errors.js';
import { bunzip2Exact, bzip2, gunzipExact, gzip, unlzmaExact } from './compression.js';

export const Compression = { none: 0, bzip2: 1, gzip: 2, lzma: 3 } as const;
export type CompressionName = keyof typeof Compression;
export const COMPRESSION_NAMES: readonly CompressionName[] = ['none', 'bzip2', 'gzip', 'lzma'];

/** Largest group (container) size a store holds: 2^24 − 1 (the idx entry holds a 24-bit size). */
export const MAX_GROUP_SIZE = 0xff_ffff;

export interface ContainerHeader {
  compression: number;
  /** Bytes of (compressed) data after the header. */
  length: number;
  /** Declared uncompressed size (equals `length` for type 0). */
  uncompressedLength: number;
  /** 5 for type 0, 9 otherwise. */
  headerSize: number;
}

export interface DecodedContainer extends ContainerHeader {
  /** The uncompressed payload. */
  data: Buffer;
  /** The u16 version trailer, when the input holds one. */
  version: number | undefined;
}

export interface ContainerLimits {
  /** Largest uncompressed size accepted (default MAX_GROUP_SIZE). */
  maxUncompressed?: number;
}

/** Reads and checks a container header at the reader's offset. */
export function readContainerHeader(r: WireReader, limits: ContainerLimits = {}): ContainerHeader {
  const max = limits.maxUncompressed ?? MAX_GROUP_SIZE;
  const at = r.offset;
  const compression = r.u8();
  if (compression > 3) {
    throw new DecodeError('ERR_JS5_BAD_COMPRESSION', `unknown compression type ${compression}`, at);
  }
  const lengthAt = r.offset;
  const length = r.i32be();
  if (length < 0)
    throw new DecodeError(ErrorCode.BAD_LENGTH, `negative container length ${length}`, lengthAt);
  if (length > MAX_GROUP_SIZE) {
    throw new DecodeError(
      ErrorCode.TOO_LARGE,
      `container length ${length} exceeds ${MAX_GROUP_SIZE}`,
      lengthAt,
    );
  }
  let uncompressedLength = length;
  if (compression !== 0) {
    const uAt = r.offset;
    uncompressedLength = r.i32be();
    if (uncompressedLength < 0) {
      throw new DecodeError(ErrorCode.BAD_LENGTH, `negative uncompressed length ${uncompressedLength}`, uAt);
    }
    if (uncompressedLength > max) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `uncompressed length ${uncompressedLength} exceeds ${max}`,
        uAt,
      );
    }
  } else if (length > max) {
    throw new DecodeError(ErrorCode.TOO_LARGE, `container length ${length} exceeds ${max}`, lengthAt);
  }
  return { compression, length, uncompressedLength, headerSize: compression === 0 ? 5 : 9 };
}

/** Size of the container at the start of `bytes` (header + data, no trailer). */
export function containerSize(bytes: Uint8Array): number {
  const h = readContainerHeader(new WireReader(bytes));
  return h.headerSize + h.length;
}

/**
 * Decodes a container. `trailer`: 'none' (exactly the container), 'optional' (0 or 2 bytes
 * after it), 'required' (exactly 2 bytes after it).
 */
export function decodeContainer(
  bytes: Uint8Array,
  trailer: 'none' | 'optional' | 'required' = 'optional',
  limits: ContainerLimits = {},
): DecodedContainer {
  const r = new WireReader(bytes);
  const h = readContainerHeader(r, limits);
  const dataAt = r.offset;
  const raw = r.bytes(h.length);
  let version: number | undefined;
  const left = r.remaining;
  if (left === 2 && trailer !== 'none') version = r.u16be();
  else if (left !== 0 || trailer === 'required') {
    if (left === 0)
      throw new DecodeError(ErrorCode.INCOMPLETE, 'container lacks its 2-byte version trailer', r.offset);
    if (left < 2 && trailer !== 'none')
      throw new DecodeError(ErrorCode.INCOMPLETE, 'truncated version trailer', r.offset);
    throw new DecodeError(ErrorCode.TRAILING_BYTES, `${left} byte(s) after the container`, r.offset);
  }
  let data: Buffer;
  switch (h.compression) {
    case 0:
      data = raw;
      break;
    case 1:
      data = bunzip2Exact(raw, h.uncompressedLength, dataAt);
      break;
    case 2:
      data = gunzipExact(raw, h.uncompressedLength, dataAt);
      break;
    default:
      data = unlzmaExact(raw, h.uncompressedLength, dataAt);
      break;
  }
  return { ...h, data, version };
}

/** Builds a container. LZMA is read-only here. */
export function encodeContainer(data: Uint8Array, compression: CompressionName, version?: number): Buffer {
  if (data.length > MAX_GROUP_SIZE)
    throw new Js5Error('ERR_JS5_BAD_ARGUMENT', `group of ${data.length} bytes exceeds ${MAX_GROUP_SIZE}`);
  let body: Buffer;
  if (compression === 'none') body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  else if (compression === 'gzip') body = gzip(data);
  else if (compression === 'bzip2') body = bzip2(data);
  else throw new Js5Error('ERR_JS5_BAD_ARGUMENT', 'lzma compression is not supported (read only)');
  const headerSize = compression === 'none' ? 5 : 9;
  const out = Buffer.allocUnsafe(headerSize + body.length + (version === undefined ? 0 : 2));
  out[0] = Compression[compression];
  out.writeInt32BE(body.length, 1);
  if (headerSize === 9) out.writeInt32BE(data.length, 5);
  body.copy(out, headerSize);
  if (version !== undefined) out.writeUInt16BE(version & 0xffff, headerSize + body.length);
  return out;
}

/** Splits a stored group into its container and version trailer (if 2 bytes follow it). */
export function splitTrailer(stored: Buffer): { container: Buffer; version: number | undefined } {
  const size = containerSize(stored);
  if (size > stored.length)
    throw new DecodeError(ErrorCode.INCOMPLETE, 'stored group is shorter than its container', 0);
  if (stored.length === size) return { container: stored, version: undefined };
  if (stored.length !== size + 2) {
    throw new DecodeError(
      ErrorCode.TRAILING_BYTES,
      `${stored.length - size} bytes after the container`,
      size,
    );
  }
  return { container: stored.subarray(0, size), version: stored.readUInt16BE(size) };
}

/** Appends a u16 version trailer. */
export function appendTrailer(container: Uint8Array, version: number): Buffer {
  const out = Buffer.allocUnsafe(container.length + 2);
  out.set(container, 0);
  out.writeUInt16BE(version & 0xffff, container.length);
  return out;
}
