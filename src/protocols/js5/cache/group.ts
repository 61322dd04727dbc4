/**
 * Multi-file groups (docs/js5.md, "Multi-file groups"). A group whose index entry lists several files holds them as
 * stripes: the files' bytes stripe after stripe, then for each stripe one int32 length delta per
 * file, then a u8 stripe count. A single-file group is just the file.
 */
import { DecodeError, ErrorCode } from '../../../wire/errors.js';

/** Splits a group payload into `fileCount` files. Throws DecodeError. */
export function unpackGroup(data: Buffer, fileCount: number): Buffer[] {
  if (fileCount === 1) return [data];
  if (fileCount === 0) {
    if (data.length !== 0)
      throw new DecodeError(ErrorCode.TRAILING_BYTES, 'a group with no files has data', 0);
    return [];
  }
  if (data.length < 1) throw new DecodeError(ErrorCode.INCOMPLETE, 'group lacks its stripe count', 0);
  const stripes = data[data.length - 1]!;
  const trailer = data.length - 1 - stripes * fileCount * 4;
  if (trailer < 0) throw new DecodeError(ErrorCode.BAD_LENGTH, `${stripes} stripes do not fit the group`, 0);
  const lengths = new Array<number>(fileCount).fill(0);
  const stripeLengths: number[] = [];
  let at = trailer;
  let total = 0;
  for (let s = 0; s < stripes; s++) {
    let len = 0;
    for (let f = 0; f < fileCount; f++) {
      len += data.readInt32BE(at);
      at += 4;
      if (len < 0) throw new DecodeError(ErrorCode.BAD_LENGTH, `negative length in stripe ${s}`, at - 4);
      stripeLengths.push(len);
      lengths[f]! += len;
      total += len;
    }
  }
  if (total !== trailer) {
    throw new DecodeError(
      ErrorCode.BAD_LENGTH,
      `stripes hold ${total} bytes, the group has ${trailer}`,
      trailer,
    );
  }
  const files = lengths.map((n) => Buffer.allocUnsafe(n));
  const filled = new Array<number>(fileCount).fill(0);
  let src = 0;
  for (let i = 0; i < stripeLengths.length; i++) {
    const f = i % fileCount;
    const n = stripeLengths[i]!;
    data.copy(files[f]!, filled[f]!, src, src + n);
    filled[f]! += n;
    src += n;
  }
  return files;
}

/** Packs files into one group payload (one stripe; a single file is stored as it is). */
export function packGroup(files: readonly Uint8Array[]): Buffer {
  if (files.length === 1) return Buffer.from(files[0]!);
  if (files.length === 0) return Buffer.alloc(0);
  const size = files.reduce((n, f) => n + f.length, 0);
  const out = Buffer.allocUnsafe(size + files.length * 4 + 1);
  let o = 0;
  for (const f of files) {
    out.set(f, o);
    o += f.length;
  }
  let prev = 0;
  for (const f of files) {
    out.writeInt32BE(f.length - prev, o);
    prev = f.length;
    o += 4;
  }
  out[o] = 1;
  return out;
}
