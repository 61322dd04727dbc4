/**
 * PRUDP V0 checksums. The access key contributes only the low byte of the sum of its bytes,
 * and only on the Rendez-Vous streams (3 and 10); other streams (DO, NAT …) use 0.
 *
 * - 1 byte: key byte + the bytes of the u32 sum of the data's whole little-endian words +
 *   the remaining tail bytes, all mod 256.
 * - 4 bytes: key byte + the sum of the data's u32le words, zero-padded, mod 2^32.
 */
import { StreamType } from './constants.js';

export type ChecksumWidth = 1 | 4;

/** Low byte of the sum of the access key's bytes. */
export function accessKeyByte(accessKey: string | Uint8Array): number {
  const b = typeof accessKey === 'string' ? Buffer.from(accessKey, 'latin1') : accessKey;
  let s = 0;
  for (let i = 0; i < b.length; i++) s += b[i]!;
  return s & 0xff;
}

/** The key byte a packet of `streamType` adds (the key counts on stream 3 and 10 only). */
export function keyByteFor(streamType: number, keyByte: number): number {
  return streamType === StreamType.OLD_RV_SECURE || streamType === StreamType.RV_SECURE ? keyByte : 0;
}

/** Sum of the u32le words of buf[start, end), zero-padded, mod 2^32. */
function wordSum(buf: Uint8Array, start: number, end: number): number {
  let sum = 0;
  let i = start;
  const whole = start + ((end - start) & ~3);
  for (; i < whole; i += 4) {
    sum = (sum + (buf[i]! | (buf[i + 1]! << 8) | (buf[i + 2]! << 16) | (buf[i + 3]! << 24))) >>> 0;
  }
  return sum;
}

/** The 1-byte checksum of buf[start, end) with `keyByte` (already stream-filtered). */
export function checksum8(buf: Uint8Array, start: number, end: number, keyByte: number): number {
  const whole = start + ((end - start) & ~3);
  const w = wordSum(buf, start, end);
  let s = keyByte + (w & 0xff) + ((w >>> 8) & 0xff) + ((w >>> 16) & 0xff) + (w >>> 24);
  for (let i = whole; i < end; i++) s += buf[i]!;
  return s & 0xff;
}

/** The 4-byte checksum of buf[start, end) with `keyByte` (already stream-filtered). */
export function checksum32(buf: Uint8Array, start: number, end: number, keyByte: number): number {
  let sum = wordSum(buf, start, end);
  const whole = start + ((end - start) & ~3);
  if (whole < end) {
    let last = 0;
    for (let i = whole; i < end; i++) last |= buf[i]! << ((i - whole) * 8);
    sum = (sum + (last >>> 0)) >>> 0;
  }
  return (sum + keyByte) >>> 0;
}

export function checksum(
  width: ChecksumWidth,
  buf: Uint8Array,
  start: number,
  end: number,
  keyByte: number,
): number {
  return width === 1 ? checksum8(buf, start, end, keyByte) : checksum32(buf, start, end, keyByte);
}

/**
 * Learns the checksum width and key byte from a client's first SYN datagram (a SYN without
 * payload is 14 header bytes, +2 with HAS_SIZE, + the checksum). Returns undefined when the
 * datagram is not such a SYN.
 */
export function learnFromSyn(datagram: Uint8Array): { width: ChecksumWidth; keyByte: number } | undefined {
  if (datagram.length < 15 || (datagram[2]! & 0x07) !== 0) return undefined;
  const hasSize = (datagram[2]! & 0x40) !== 0;
  const header = hasSize ? 16 : 14;
  let width: ChecksumWidth;
  if (datagram.length === header + 1) width = 1;
  else if (datagram.length === header + 4) width = 4;
  else return undefined;
  if (hasSize && (datagram[14]! | (datagram[15]! << 8)) !== 0) return undefined;
  if (width === 1) {
    const k = (datagram[header]! - checksum8(datagram, 0, header, 0)) & 0xff;
    return { width, keyByte: k };
  }
  const got =
    (datagram[header]! |
      (datagram[header + 1]! << 8) |
      (datagram[header + 2]! << 16) |
      (datagram[header + 3]! << 24)) >>>
    0;
  const k = (got - checksum32(datagram, 0, header, 0)) >>> 0;
  // The key contributes one byte; anything larger is not a key-derived checksum.
  return k <= 0xff ? { width, keyByte: k } : undefined;
}
