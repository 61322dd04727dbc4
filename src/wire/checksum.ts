/**
 * The checksums the load generators put in their payloads to prove integrity end to end: one
 * implementation of each, table-driven, over a range of a buffer, with no allocation (they run for
 * every message a generator sends or receives). CRC-32 is zlib's (IEEE 802.3, reflected); CRC-16 is
 * CRC-16/CCITT-FALSE (polynomial 0x1021, initial 0xffff, not reflected), for carriers too narrow for
 * 32 bits. A CRC catches every single flipped bit and every burst up to its width, which a weighted
 * sum does not.
 */

const CRC32_TABLE = (() => {
  const t = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c;
  }
  return t;
})();

const CRC16_TABLE = (() => {
  const t = new Uint16Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n << 8;
    for (let k = 0; k < 8; k++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[n] = c;
  }
  return t;
})();

/**
 * zlib's CRC-32 of `data[start, end)`, continuing from `crc` (a previous call's result, or 0), so
 * that a digest can skip the bytes that carry it: `crc32(d, 20, n, crc32(d, 0, 16))` equals
 * `zlib.crc32` of the bytes with 16..19 left out.
 */
export function crc32(data: Uint8Array, start = 0, end = data.length, crc = 0): number {
  let c = ~crc;
  for (let i = start; i < end; i++) c = CRC32_TABLE[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return ~c >>> 0;
}

/** CRC-16/CCITT-FALSE of `data[start, end)`: a value below 2^16. */
export function crc16(data: Uint8Array, start = 0, end = data.length): number {
  let c = 0xffff;
  for (let i = start; i < end; i++) c = ((c << 8) & 0xffff) ^ CRC16_TABLE[((c >>> 8) ^ data[i]!) & 0xff]!;
  return c;
}
