/** Hex helpers for fixtures, the CLI and logs. */
import { DecodeError, ErrorCode } from './errors.js';

/** Parses hex with optional whitespace, `0x` prefixes and `:`/`-` separators. */
export function parseHex(text: string): Buffer {
  const clean = text.replace(/0x/gi, '').replace(/[\s:,-]+/g, '');
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(clean)) {
    throw new DecodeError(ErrorCode.BAD_VALUE, 'not a hex string with an even number of digits', 0);
  }
  return Buffer.from(clean, 'hex');
}

/** Lowercase hex, no separators. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}
