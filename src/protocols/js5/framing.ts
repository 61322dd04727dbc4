/**
 * JS5 downstream framing (docs/js5.md, "Responses" and "Block markers"): a response is `archive u8, group u16` followed by the
 * container (minus its version trailer), with a `0xFF` byte inserted at every response offset
 * that is a positive multiple of 512 while more bytes follow. Counting restarts per response.
 * XOR (docs/js5.md, "XOR") covers every framed downstream byte after a rekey.
 */

import { DecodeError, ErrorCode } from '../../wire/errors.js';
import type { FrameMeasure } from '../../wire/framing.js';
import { Js5Error } from './errors.js';

export const BLOCK_SIZE = 512;
/** Response bytes before the container: archive u8 + group u16. */
export const RESPONSE_HEADER = 3;
/** Largest container length field accepted on the wire by default (the store's group cap). */
export const MAX_CONTAINER_LENGTH = 0xff_ffff;

/** Framed size of a response whose container (trailer stripped) is `containerLength` bytes. */
export function framedLength(containerLength: number): number {
  const n = RESPONSE_HEADER + containerLength;
  return n <= BLOCK_SIZE ? n : n + Math.ceil((n - BLOCK_SIZE) / (BLOCK_SIZE - 1));
}

/** Unframed (marker-free) size of a framed response of `framed` bytes. */
export function unframedLength(framed: number): number {
  return framed <= BLOCK_SIZE ? framed : framed - Math.ceil((framed - BLOCK_SIZE) / BLOCK_SIZE);
}

/**
 * Frames one response into a new buffer: header, container with 0xFF markers. `prefetch` ORs
 * 0x80 into the compression byte (5xx profile only: callers decide).
 */
export function frameResponse(
  archive: number,
  group: number,
  container: Uint8Array,
  prefetch = false,
): Buffer {
  if (container.length < 5) throw new Js5Error('ERR_JS5_BAD_ARGUMENT', 'container must be at least 5 bytes');
  const out = Buffer.allocUnsafe(framedLength(container.length));
  out[0] = archive;
  out[1] = group >>> 8;
  out[2] = group;
  let o = RESPONSE_HEADER;
  let i = 0;
  let first = Math.min(BLOCK_SIZE - RESPONSE_HEADER, container.length);
  out.set(container.subarray(0, first), o);
  o += first;
  i += first;
  while (i < container.length) {
    out[o++] = 0xff;
    first = Math.min(BLOCK_SIZE - 1, container.length - i);
    out.set(container.subarray(i, i + first), o);
    o += first;
    i += first;
  }
  if (prefetch) out[3]! |= 0x80;
  return out;
}

/** Removes the markers of one framed response `buf[start, end)`, checking each is 0xFF. */
export function unframeResponse(buf: Uint8Array, start: number, end: number): Buffer {
  const framed = end - start;
  const out = Buffer.allocUnsafe(unframedLength(framed));
  let o = 0;
  let i = start;
  let take = Math.min(BLOCK_SIZE, framed);
  out.set(buf.subarray(i, i + take), o);
  o += take;
  i += take;
  while (i < end) {
    if (buf[i] !== 0xff) {
      throw new DecodeError(
        'ERR_JS5_BAD_MARKER',
        `expected 0xff block marker, got 0x${buf[i]!.toString(16)}`,
        i,
      );
    }
    i++;
    take = Math.min(BLOCK_SIZE - 1, end - i);
    out.set(buf.subarray(i, i + take), o);
    o += take;
    i += take;
  }
  return out;
}

/** XORs `buf[start, end)` in place with `key` (key 0 is a no-op). */
export function xorInPlace(buf: Uint8Array, key: number, start = 0, end = buf.length): void {
  if (key === 0) return;
  for (let i = start; i < end; i++) buf[i]! ^= key;
}

/** Container length (5 or 9 header bytes + payload) from a response's compression and length fields. */
export function containerLengthOf(type: number, length: number): number {
  return length + ((type & 0x7f) === 0 ? 5 : 9);
}

/**
 * A `FrameMeasure` for a stream of framed responses (client side): reads the 8-byte header and
 * returns the framed length. Rejects negative lengths, lengths above `maxLength`, and unknown
 * compression types.
 */
export function responseMeasure(maxLength = MAX_CONTAINER_LENGTH): FrameMeasure {
  return (buf, offset, available) => {
    if (available < 8) return -1;
    const type = buf[offset + 3]! & 0x7f;
    if (type > 3) {
      throw new DecodeError('ERR_JS5_BAD_COMPRESSION', `unknown compression type ${type}`, offset + 3);
    }
    const length = buf.readInt32BE(offset + 4);
    if (length < 0)
      throw new DecodeError(ErrorCode.BAD_LENGTH, `negative container length ${length}`, offset + 4);
    if (length > maxLength) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `container length ${length} exceeds the limit of ${maxLength}`,
        offset + 4,
      );
    }
    return framedLength(containerLengthOf(type, length));
  };
}
