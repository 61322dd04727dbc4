import { DecodeError, ErrorCode } from './errors.js';

/**
 * Measures the frame that starts at `offset`. Returns its total length in bytes (header
 * included), or -1 while the header itself is not complete. Throws DecodeError when the header
 * is malformed (a length under the minimum, over the maximum, a bad marker).
 */
export type FrameMeasure = (buf: Buffer, offset: number, available: number) => number;

/** Receives one frame: `buf[start, end)`. The bytes are only valid during the call. */
export type FrameHandler = (buf: Buffer, start: number, end: number) => unknown;

export interface DeframerOptions {
  /** Largest frame accepted; a larger declared length is ERR_TOO_LARGE before anything is buffered. */
  maxFrameBytes: number;
  /** Most bytes held while paused or waiting for a frame (defaults to 2 × maxFrameBytes + 64 KiB). */
  maxBufferedBytes?: number;
  /**
   * When the buffer empties and has grown beyond this, it is released, so one large frame does
   * not pin its memory for the connection's whole life (default: kept).
   */
  maxRetainedBytes?: number;
}

const EMPTY = Buffer.alloc(0);
/** Most bytes a grown buffer holds beyond the bytes it must hold. */
const GROWTH_CAP = 256 * 1024;

/**
 * Splits a TCP byte stream into frames, whatever the fragmentation or coalescing.
 *
 * - Frames wholly inside a chunk are handed over as views of that chunk (no copy).
 * - Only a frame that spans chunks is gathered into an internal buffer, which is reused.
 * - "Need more bytes" is not an error: the partial frame is kept (`buffered > 0`).
 * - "Malformed" is a DecodeError (offset counted from the start of the stream); the deframer
 *   then stays failed, since a stream cannot be resynchronised.
 * - A handler that returns `false` pauses delivery: the rest is kept until `resume`.
 */
export class StreamDeframer {
  private acc: Buffer = EMPTY;
  private start = 0;
  private end = 0;
  private failed: DecodeError | null = null;
  private paused = false;
  /** Stream offset of `acc[start]` (or of the next byte when nothing is buffered). */
  private streamOffset = 0;
  private readonly maxFrame: number;
  private readonly maxBuffered: number;
  private readonly maxRetained: number;
  private measure: FrameMeasure;

  constructor(measure: FrameMeasure, options: DeframerOptions) {
    this.measure = measure;
    this.maxFrame = options.maxFrameBytes;
    this.maxBuffered = options.maxBufferedBytes ?? options.maxFrameBytes * 2 + 65_536;
    this.maxRetained = options.maxRetainedBytes ?? Number.POSITIVE_INFINITY;
  }

  /** Bytes of memory the internal buffer holds (at least `buffered`). */
  get capacity(): number {
    return this.acc.length;
  }

  /** Bytes held that do not yet make a whole frame (or wait behind a pause). */
  get buffered(): number {
    return this.end - this.start;
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** Total bytes consumed as whole frames so far. */
  get consumed(): number {
    return this.streamOffset;
  }

  /** Switches the framing rule, e.g. after a handshake. Applies from the next frame on. */
  setMeasure(measure: FrameMeasure): void {
    this.measure = measure;
  }

  /** Feeds a chunk. Returns false if a handler paused delivery. Throws DecodeError when malformed. */
  push(chunk: Buffer, onFrame: FrameHandler): boolean {
    if (this.failed !== null) throw this.failed;
    if (this.paused || this.end > this.start) {
      this.append(chunk, 0);
      return this.paused ? false : this.drain(onFrame);
    }
    // Fast path: nothing buffered, hand frames straight out of the chunk.
    let off = 0;
    while (off < chunk.length) {
      const len = this.measureAt(chunk, off, chunk.length - off);
      if (len < 0 || off + len > chunk.length) break;
      off += len;
      this.streamOffset += len;
      if (onFrame(chunk, off - len, off) === false) {
        this.paused = true;
        break;
      }
    }
    if (off < chunk.length) this.append(chunk, off);
    return !this.paused;
  }

  /** Ends a pause and delivers what was held. */
  resume(onFrame: FrameHandler): boolean {
    if (this.failed !== null) throw this.failed;
    this.paused = false;
    return this.drain(onFrame);
  }

  /** Drops everything held (connection closed). */
  reset(): void {
    this.start = this.end = 0;
    this.paused = false;
    if (this.acc.length > this.maxRetained) this.acc = EMPTY;
  }

  private drain(onFrame: FrameHandler): boolean {
    while (this.end > this.start) {
      const available = this.end - this.start;
      const len = this.measureAt(this.acc, this.start, available);
      if (len < 0 || len > available) break;
      const s = this.start;
      this.start += len;
      this.streamOffset += len;
      if (onFrame(this.acc, s, s + len) === false) {
        this.paused = true;
        break;
      }
    }
    if (this.start === this.end) {
      this.start = this.end = 0;
      if (this.acc.length > this.maxRetained) this.acc = EMPTY;
    }
    return !this.paused;
  }

  private measureAt(buf: Buffer, offset: number, available: number): number {
    let len: number;
    try {
      len = this.measure(buf, offset, available);
    } catch (e) {
      // The measure reports offsets within `buf`; report them within the stream instead.
      this.failed =
        e instanceof DecodeError
          ? e.atBase(this.streamOffset - offset)
          : new DecodeError('ERR_INTERNAL', String(e), this.streamOffset);
      throw this.failed;
    }
    if (len > this.maxFrame) {
      this.failed = new DecodeError(
        ErrorCode.TOO_LARGE,
        `frame of ${len} bytes exceeds the limit of ${this.maxFrame}`,
        this.streamOffset,
      );
      throw this.failed;
    }
    if (len === 0) {
      this.failed = new DecodeError(ErrorCode.BAD_LENGTH, 'frame of length 0', this.streamOffset);
      throw this.failed;
    }
    return len;
  }

  private append(chunk: Buffer, from: number): void {
    const n = chunk.length - from;
    if (this.end - this.start + n > this.maxBuffered) {
      this.failed = new DecodeError(
        ErrorCode.TOO_LARGE,
        `more than ${this.maxBuffered} bytes buffered without a complete frame`,
        this.streamOffset,
      );
      throw this.failed;
    }
    if (this.end + n > this.acc.length) {
      const held = this.end - this.start;
      if (
        held + n <= this.acc.length &&
        (this.acc.length <= this.maxRetained || (held + n) * 4 > this.acc.length)
      ) {
        // Enough room once the held bytes move to the front.
        this.acc.copy(this.acc, 0, this.start, this.end);
      } else if (held + n <= this.acc.length) {
        // A buffer grown by a large frame now holds a small remainder: shrink it.
        const next = Buffer.allocUnsafe(Math.max((held + n) * 2, 4096));
        this.acc.copy(next, 0, this.start, this.end);
        this.acc = next;
      } else {
        // Doubling, but never more than 256 KiB beyond what has arrived: a partial frame holds
        // about what arrived, not twice that.
        const next = Buffer.allocUnsafe(
          Math.max(held + n, Math.min(this.acc.length * 2, held + n + GROWTH_CAP), 4096),
        );
        this.acc.copy(next, 0, this.start, this.end);
        this.acc = next;
      }
      this.start = 0;
      this.end = held;
    }
    chunk.copy(this.acc, this.end, from);
    this.end += n;
  }
}

export interface LengthPrefixOptions {
  /** Width and byte order of the length field. */
  prefix: 'u8' | 'u16le' | 'u16be' | 'u32le' | 'u32be';
  /** Where the length field starts inside the frame (default 0). */
  at?: number;
  /** The length counts the whole frame (`frame`) or only the bytes after the length field (`rest`). */
  counts: 'frame' | 'rest';
  /** Smallest valid total frame length; shorter is ERR_BAD_LENGTH. */
  minFrameBytes?: number;
  /** Largest valid total frame length; longer is ERR_TOO_LARGE (checked before buffering). */
  maxFrameBytes: number;
}

function readPrefix(buf: Buffer, o: number, prefix: LengthPrefixOptions['prefix']): number {
  switch (prefix) {
    case 'u8':
      return buf[o]!;
    case 'u16le':
      return buf[o]! | (buf[o + 1]! << 8);
    case 'u16be':
      return (buf[o]! << 8) | buf[o + 1]!;
    case 'u32le':
      return (buf[o]! | (buf[o + 1]! << 8) | (buf[o + 2]! << 16) | (buf[o + 3]! << 24)) >>> 0;
    case 'u32be':
      return ((buf[o]! << 24) | (buf[o + 1]! << 16) | (buf[o + 2]! << 8) | buf[o + 3]!) >>> 0;
  }
}

/** A `FrameMeasure` for the usual "length field, then payload" framing. */
export function lengthPrefixed(options: LengthPrefixOptions): FrameMeasure {
  const at = options.at ?? 0;
  const width = options.prefix === 'u8' ? 1 : options.prefix.startsWith('u16') ? 2 : 4;
  const headerEnd = at + width;
  const min = options.minFrameBytes ?? headerEnd;
  const max = options.maxFrameBytes;
  const prefix = options.prefix;
  const rest = options.counts === 'rest';
  return (buf, offset, available) => {
    if (available < headerEnd) return -1;
    const n = readPrefix(buf, offset + at, prefix);
    const total = rest ? headerEnd + n : n;
    if (total > max) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `frame length ${total} exceeds the limit of ${max}`,
        offset + at,
      );
    }
    if (total < min) {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `frame length ${total} is under the minimum of ${min}`,
        offset + at,
      );
    }
    return total;
  };
}

/** A `FrameMeasure` for frames of one fixed size. */
export function fixedFrames(size: number): FrameMeasure {
  return (_buf, _offset, available) => (available < size ? -1 : size);
}
