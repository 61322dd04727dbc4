import zlib from 'node:zlib';

/** CRC32 as a signed 32-bit int (how Js5Index and the master index store it). */
export function crc32(bytes: Uint8Array): number {
  return zlib.crc32(bytes) | 0;
}
