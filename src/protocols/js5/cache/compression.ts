/**
 * The compression back ends of JS5 containers, each capped at the size the container declares
 * so that a small container can never expand into a large allocation (no decompression bombs).
 *
 * - gzip: node:zlib with `maxOutputLength` = declared size.
 * - bzip2: `compressjs` (pure JS; compresses with a chosen block size, which JS5 needs: block
 *   size 1, header stripped). Its decoder writes through an output stream we supply, which
 *   throws as soon as the declared size would be passed.
 * - lzma (read only): gamewire's own byte-oriented decoder (`lzma.ts`), which writes into a
 *   buffer of exactly the declared size and fails as soon as output would pass it.
 */
import { createRequire } from 'node:module';
import zlib from 'node:zlib';
import { DecodeError } from '../../../wire/errors.js';
import { Js5Error } from '../errors.js';
import { LzmaError, lzmaDecode } from './lzma.js';

const require = createRequire(import.meta.url);

interface ByteSink {
  writeByte(b: number): void;
}
interface CompressJs {
  Bzip2: {
    compressFile(input: Uint8Array, output: null, blockSize: number): Uint8Array | number[];
    decompressFile(input: Uint8Array, output: ByteSink): unknown;
  };
}

let bzip: CompressJs | undefined;

function compressjs(): CompressJs {
  bzip ??= require('compressjs') as CompressJs;
  return bzip;
}

const BZIP2_HEADER = Buffer.from('BZh1', 'latin1');
/** Largest LZMA dictionary accepted (OpenRS2's cap). */
export const MAX_LZMA_DICTIONARY = 64 * 1024 * 1024;

function fail(code: string, detail: string, offset: number): never {
  throw new DecodeError(code, detail, offset);
}

/** gzip-decompresses `data` (a full gzip member) into exactly `size` bytes. */
export function gunzipExact(data: Uint8Array, size: number, offset: number): Buffer {
  if (data.length < 18 || data[0] !== 0x1f || data[1] !== 0x8b) {
    fail('ERR_JS5_BAD_GZIP', 'gzip stream does not start with 1f 8b', offset);
  }
  let out: Buffer;
  try {
    // maxOutputLength must be ≥ 1; one extra byte lets overflow be told from an exact fit.
    out = zlib.gunzipSync(data, { maxOutputLength: size + 1 });
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ERR_BUFFER_TOO_LARGE')
      fail('ERR_JS5_OVERFLOW', `gzip data exceeds the declared ${size} bytes`, offset);
    fail('ERR_JS5_BAD_GZIP', `gzip: ${(e as Error).message}`, offset);
  }
  if (out.length !== size) {
    fail(
      out.length > size ? 'ERR_JS5_OVERFLOW' : 'ERR_JS5_UNDERFLOW',
      `gzip data is ${out.length} bytes, the container declares ${size}`,
      offset,
    );
  }
  return out;
}

/**
 * A gzip member with the plain 10-byte header the 530 client expects (no name, no mtime), at
 * zlib's default level (6, also what Java's GZIPOutputStream writes): level 9 took four times the
 * CPU on cache-like data for 2 % fewer bytes (a demo cache built in 0.8 CPU-seconds instead of 1.4).
 */
export function gzip(data: Uint8Array): Buffer {
  const out = zlib.gzipSync(data, { level: 6 });
  // zlib already writes 1f8b 08 00 00000000 00 03; clear the OS byte as OpenRS2 does.
  out[4] = out[5] = out[6] = out[7] = 0;
  out[8] = 0;
  out[9] = 0;
  return out;
}

/** Thrown by the sink when bzip2 output passes the declared size; caught just below. */
class SinkOverflow extends Js5Error {
  constructor() {
    super('ERR_JS5_OVERFLOW', 'overflow');
  }
}

class CappedSink implements ByteSink {
  readonly out: Buffer;
  pos = 0;
  constructor(size: number) {
    this.out = Buffer.allocUnsafe(size);
  }
  writeByte(b: number): void {
    if (this.pos >= this.out.length) throw new SinkOverflow();
    this.out[this.pos++] = b;
  }
}

/** Decompresses a headerless bzip2 stream (block size 1) into exactly `size` bytes. */
export function bunzip2Exact(data: Uint8Array, size: number, offset: number): Buffer {
  const input = Buffer.concat([BZIP2_HEADER, data]);
  const sink = new CappedSink(size);
  try {
    compressjs().Bzip2.decompressFile(input, sink);
  } catch (e) {
    if (e instanceof SinkOverflow) {
      fail('ERR_JS5_OVERFLOW', `bzip2 data exceeds the declared ${size} bytes`, offset);
    }
    fail('ERR_JS5_BAD_BZIP2', `bzip2: ${e instanceof Error ? e.message : String(e)}`, offset);
  }
  if (sink.pos !== size)
    fail('ERR_JS5_UNDERFLOW', `bzip2 data is ${sink.pos} bytes, the container declares ${size}`, offset);
  return sink.out;
}

/** bzip2 with block size 1, without the 4-byte `BZh1` header (what JS5 stores). */
export function bzip2(data: Uint8Array): Buffer {
  const out = compressjs().Bzip2.compressFile(data, null, 1);
  return Buffer.from(out instanceof Uint8Array ? out.subarray(4) : out.slice(4));
}

/**
 * Decompresses JS5's LZMA form (`props u8, dictSize u32 LE`, raw stream, no size field) into
 * exactly `size` bytes, with gamewire's own decoder (`lzma.ts`): it writes into a buffer of the
 * declared size and stops with `ERR_JS5_OVERFLOW` as soon as a literal or match would pass it.
 */
export function unlzmaExact(data: Uint8Array, size: number, offset: number): Buffer {
  let out: Uint8Array;
  try {
    out = lzmaDecode(data, size, MAX_LZMA_DICTIONARY);
  } catch (e) {
    if (e instanceof LzmaError) {
      if (e.reason === 'overflow') fail('ERR_JS5_OVERFLOW', e.message, offset);
      if (e.reason === 'underflow') fail('ERR_JS5_UNDERFLOW', e.message, offset);
      fail('ERR_JS5_BAD_LZMA', `lzma: ${e.message}`, offset);
    }
    throw e;
  }
  return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
}
