/**
 * The PRUDP V0 packet, declared once with the wire core (`PrudpHeader`: the fields, their
 * widths and the conditions under which they exist), plus the hot-path reader and writer that
 * follow the same declaration without allocating per packet.
 *
 * Layout: source vport, destination vport, type_flags (`flags << 3 | type`), session id,
 * packet signature (u32), sequence id (u16), then connection signature (u32, SYN and CONNECT
 * only) or fragment id (u8, DATA only), then payload size (u16, HAS_SIZE only), the payload, and
 * a 1- or 4-byte checksum over everything before it. Several packets may share a datagram;
 * only a packet with HAS_SIZE can be followed by another.
 */

import { EncodeError, GamewireError } from '../../../wire/errors.js';
import { DecodeError, doc, ErrorCode, message, t, type WireWriter, when } from '../../../wire/index.js';
import { type ChecksumWidth, checksum, keyByteFor } from './checksum.js';
import { Flag, PacketType } from './constants.js';

/** The header as a declared message (CLI, inspector, dissector; the hot path mirrors it). */
export const PrudpHeader = message('PRUDP', {
  source: doc('source vport: stream type << 4 | port', t.u8),
  destination: doc('destination vport: stream type << 4 | port', t.u8),
  typeFlags: doc('packet type (low 3 bits) | flags << 3 (ACK 1, RELIABLE 2, NEED_ACK 4, HAS_SIZE 8)', t.u8),
  sessionId: doc("the sender's random session byte (0 in SYN and SYN-ACK)", t.u8),
  packetSignature: doc('the connection signature the peer announced (0 before one is known)', t.u32le),
  sequenceId: t.u16le,
  connectionSignature: when((p) => (p.typeFlags & 0x07) <= PacketType.CONNECT, t.u32le),
  fragmentId: when((p) => (p.typeFlags & 0x07) === PacketType.DATA, t.u8),
  payloadSize: when((p) => (p.typeFlags & Flag.HAS_SIZE) !== 0, t.u16le),
});

/** PRUDP-specific decode error codes. */
export const PrudpErrorCode = {
  BAD_CHECKSUM: 'ERR_BAD_CHECKSUM',
  /** A payload that does not decrypt or inflate. */
  BAD_PAYLOAD: 'ERR_PRUDP_BAD_PAYLOAD',
  /** Credentials that do not check out (a forged ticket, a bad signature, a wrong response). */
  AUTH: 'ERR_PRUDP_AUTH',
} as const;

/** A PRUDP connection setup that fails: bad CONNECT credentials or a server that does not prove itself. */
export class PrudpError extends GamewireError {
  override get name(): string {
    return 'PrudpError';
  }
}

/** One parsed packet. The hot path reuses one object; `payload` is a view into the datagram. */
export interface PrudpPacket {
  source: number;
  destination: number;
  type: number;
  /** The flag bits as they sit in type_flags (`Flag.*`). */
  flags: number;
  sessionId: number;
  packetSignature: number;
  sequenceId: number;
  /** SYN and CONNECT only (0 otherwise). */
  connectionSignature: number;
  /** DATA only (0 otherwise). */
  fragmentId: number;
  payload: Buffer;
  checksum: number;
  /** Offset of the packet in its datagram. */
  offset: number;
}

export function newPacket(): PrudpPacket {
  return {
    source: 0,
    destination: 0,
    type: 0,
    flags: 0,
    sessionId: 0,
    packetSignature: 0,
    sequenceId: 0,
    connectionSignature: 0,
    fragmentId: 0,
    payload: EMPTY,
    checksum: 0,
    offset: 0,
  };
}

const EMPTY = Buffer.alloc(0);

/** How a datagram's checksums are checked. */
export interface ChecksumConfig {
  width: ChecksumWidth;
  /** Low byte of the access key's byte sum (applied on streams 3 and 10 only). */
  keyByte: number;
}

/**
 * Reads the packet at `buf[offset]` into `out` and returns the offset after it. Throws
 * DecodeError (ERR_INCOMPLETE for a short packet, ERR_BAD_CHECKSUM with the expected and
 * actual values). Allocates nothing but the payload view.
 */
export function readPacket(buf: Buffer, offset: number, cfg: ChecksumConfig, out: PrudpPacket): number {
  const end = buf.length;
  const width = cfg.width;
  if (end - offset < 10 + width) {
    throw new DecodeError(ErrorCode.INCOMPLETE, `PRUDP packet needs at least ${10 + width} bytes`, offset);
  }
  const tf = buf[offset + 2]!;
  const type = tf & 0x07;
  out.offset = offset;
  out.source = buf[offset]!;
  out.destination = buf[offset + 1]!;
  out.type = type;
  out.flags = tf & 0xf8;
  out.sessionId = buf[offset + 3]!;
  out.packetSignature = buf.readUInt32LE(offset + 4);
  out.sequenceId = buf.readUInt16LE(offset + 8);
  let p = offset + 10;
  out.connectionSignature = 0;
  out.fragmentId = 0;
  if (type <= PacketType.CONNECT) {
    if (end - p < 4 + width)
      throw new DecodeError(ErrorCode.INCOMPLETE, 'connectionSignature: 4 bytes needed', p);
    out.connectionSignature = buf.readUInt32LE(p);
    p += 4;
  } else if (type === PacketType.DATA) {
    if (end - p < 1 + width) throw new DecodeError(ErrorCode.INCOMPLETE, 'fragmentId: 1 byte needed', p);
    out.fragmentId = buf[p]!;
    p += 1;
  }
  let size: number;
  if ((tf & Flag.HAS_SIZE) !== 0) {
    if (end - p < 2 + width) throw new DecodeError(ErrorCode.INCOMPLETE, 'payloadSize: 2 bytes needed', p);
    size = buf.readUInt16LE(p);
    p += 2;
    if (end - p < size + width) {
      throw new DecodeError(
        ErrorCode.INCOMPLETE,
        `payload of ${size} bytes and checksum do not fit in the ${end - p} bytes left`,
        p,
      );
    }
  } else {
    size = end - p - width;
  }
  out.payload = buf.subarray(p, p + size);
  p += size;
  const key = keyByteFor(out.source >> 4, cfg.keyByte);
  const expected = checksum(width, buf, offset, p, key);
  const actual = width === 1 ? buf[p]! : buf.readUInt32LE(p);
  out.checksum = actual;
  if (expected !== actual) {
    const hex = (v: number) => `0x${v.toString(16).padStart(width * 2, '0')}`;
    throw new DecodeError(
      PrudpErrorCode.BAD_CHECKSUM,
      `bad checksum: expected ${hex(expected)}, got ${hex(actual)}`,
      p,
      'checksum',
    );
  }
  return p + width;
}

/** The fields a packet is written from. */
export interface PacketFields {
  source: number;
  destination: number;
  type: number;
  flags: number;
  sessionId: number;
  packetSignature: number;
  sequenceId: number;
  connectionSignature?: number;
  fragmentId?: number;
}

/** Appends one packet (header, payload, checksum) to `w`; returns its start offset. */
export function writePacket(
  w: WireWriter,
  f: PacketFields,
  payload: Uint8Array | undefined,
  cfg: ChecksumConfig,
): number {
  const start = w.offset;
  const n = payload?.length ?? 0;
  if (n > 0xffff && (f.flags & Flag.HAS_SIZE) !== 0)
    throw new EncodeError(ErrorCode.TOO_LARGE, 'PRUDP payload over 65535 bytes');
  w.u8(f.source);
  w.u8(f.destination);
  w.u8((f.flags & 0xf8) | (f.type & 0x07));
  w.u8(f.sessionId);
  w.u32le(f.packetSignature >>> 0);
  w.u16le(f.sequenceId & 0xffff);
  if (f.type <= PacketType.CONNECT) w.u32le((f.connectionSignature ?? 0) >>> 0);
  else if (f.type === PacketType.DATA) w.u8(f.fragmentId ?? 0);
  if ((f.flags & Flag.HAS_SIZE) !== 0) w.u16le(n);
  if (payload !== undefined && n > 0) w.bytes(payload);
  const key = keyByteFor(f.source >> 4, cfg.keyByte);
  const sum = checksum(cfg.width, w.buf, start, w.offset, key);
  if (cfg.width === 1) w.u8(sum);
  else w.u32le(sum);
  return start;
}
