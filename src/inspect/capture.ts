/**
 * Capture files: pcap (both byte orders, micro- and nanosecond timestamps) and pcapng (section
 * header, interface description, enhanced and simple packet blocks), read incrementally so the
 * same parser serves a whole file and a live `tcpdump -U -w -` stream.
 *
 * Formats: https://www.tcpdump.org/manpages/pcap-savefile.5.txt and
 * https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html
 *
 * Every failure is a `CaptureError` (a DecodeError whose offset counts from the start of the
 * file); nothing is allocated from a length field before it is checked against a limit.
 */
import { DecodeError } from '../wire/errors.js';

export class CaptureError extends DecodeError {
  override get name(): string {
    return 'CaptureError';
  }
}

export const CaptureErrorCode = {
  /** Not a pcap or pcapng file. */
  BAD_MAGIC: 'ERR_CAPTURE_BAD_MAGIC',
  /** The file ends inside a header, record or block. */
  TRUNCATED: 'ERR_CAPTURE_TRUNCATED',
  /** A record or block longer than the limit, or a length that contradicts its block. */
  BAD_LENGTH: 'ERR_CAPTURE_BAD_LENGTH',
  /** A pcapng packet names an interface that was never described. */
  BAD_INTERFACE: 'ERR_CAPTURE_BAD_INTERFACE',
} as const;

export interface CaptureLimits {
  /** Largest packet record or pcapng block accepted (bytes). */
  maxRecordBytes: number;
  /** Most pcapng interfaces per section. */
  maxInterfaces: number;
}

export const DEFAULT_CAPTURE_LIMITS: CaptureLimits = { maxRecordBytes: 1 << 20, maxInterfaces: 256 };

/** One captured packet. `data` is a view, valid only during the callback. */
export interface CapturedPacket {
  /** Capture time in microseconds since the Unix epoch. */
  timeUs: number;
  linkType: number;
  data: Buffer;
  /** Length on the wire (data may be shorter when the capture's snap length cut it). */
  originalLength: number;
}

export type PacketHandler = (packet: CapturedPacket) => void;

const PCAP_MAGIC_US = 0xa1b2c3d4;
const PCAP_MAGIC_NS = 0xa1b23c4d;
const PCAPNG_SHB = 0x0a0d0d0a;
const PCAPNG_BYTE_ORDER = 0x1a2b3c4d;
const EMPTY = Buffer.alloc(0);

interface InterfaceInfo {
  linkType: number;
  /** Multiply a raw timestamp by this to get microseconds. */
  toMicros: number;
}

type Format = 'unknown' | 'pcap' | 'pcapng';

/**
 * Incremental capture parser. `push` chunks as they arrive; every complete packet goes to the
 * handler; `end` checks that nothing is left half-read.
 */
export class CaptureParser {
  format: Format = 'unknown';
  private acc: Buffer = EMPTY;
  private start = 0;
  private end_ = 0;
  /** File offset of acc[start]. */
  private fileOffset = 0;
  private le = true;
  private pcapLinkType = 0;
  private pcapToMicros = 1;
  private headerDone = false;
  private interfaces: InterfaceInfo[] = [];
  private readonly limits: CaptureLimits;
  private readonly onPacket: PacketHandler;
  /** Reused for every packet: handlers must not keep it. */
  private readonly packet: CapturedPacket = { timeUs: 0, linkType: 0, data: EMPTY, originalLength: 0 };
  packets = 0;

  constructor(onPacket: PacketHandler, limits: Partial<CaptureLimits> = {}) {
    this.onPacket = onPacket;
    this.limits = { ...DEFAULT_CAPTURE_LIMITS, ...limits };
  }

  /** Total bytes consumed as complete records. */
  get consumed(): number {
    return this.fileOffset;
  }

  push(chunk: Buffer): void {
    if (this.end_ === this.start) {
      // Nothing held: parse straight out of the chunk, keep only its tail.
      this.acc = chunk;
      this.start = 0;
      this.end_ = chunk.length;
      this.parse();
      if (this.start < this.end_) {
        const rest = Buffer.allocUnsafe(Math.max(this.end_ - this.start, 4096));
        chunk.copy(rest, 0, this.start, this.end_);
        this.acc = rest;
        this.end_ -= this.start;
        this.start = 0;
      } else {
        this.acc = EMPTY;
        this.start = this.end_ = 0;
      }
      return;
    }
    const held = this.end_ - this.start;
    if (held + chunk.length > this.acc.length) {
      const next = Buffer.allocUnsafe(Math.max(held + chunk.length, this.acc.length * 2));
      this.acc.copy(next, 0, this.start, this.end_);
      this.acc = next;
    } else if (this.start > 0) {
      this.acc.copy(this.acc, 0, this.start, this.end_);
    }
    this.start = 0;
    this.end_ = held;
    chunk.copy(this.acc, this.end_);
    this.end_ += chunk.length;
    this.parse();
  }

  /** The input ended: anything left over is a truncated record. */
  end(): void {
    if (this.format === 'unknown' && this.end_ - this.start === 0 && this.fileOffset === 0) {
      throw new CaptureError(CaptureErrorCode.TRUNCATED, 'empty capture file', 0);
    }
    if (this.end_ > this.start || !this.headerDone) {
      throw new CaptureError(
        CaptureErrorCode.TRUNCATED,
        `capture ends inside a ${this.headerDone ? 'record' : 'file header'} (${this.end_ - this.start} byte(s) left)`,
        this.fileOffset,
      );
    }
  }

  private u32(o: number): number {
    return this.le ? this.acc.readUInt32LE(o) : this.acc.readUInt32BE(o);
  }

  private u16(o: number): number {
    return this.le ? this.acc.readUInt16LE(o) : this.acc.readUInt16BE(o);
  }

  private advance(n: number): void {
    this.start += n;
    this.fileOffset += n;
  }

  private parse(): void {
    if (this.format === 'unknown') {
      if (this.end_ - this.start < 4) return;
      const be = this.acc.readUInt32BE(this.start);
      const le = this.acc.readUInt32LE(this.start);
      if (be === PCAPNG_SHB) this.format = 'pcapng';
      else if (le === PCAP_MAGIC_US || le === PCAP_MAGIC_NS) {
        this.format = 'pcap';
        this.le = true;
        this.pcapToMicros = le === PCAP_MAGIC_NS ? 1e-3 : 1;
      } else if (be === PCAP_MAGIC_US || be === PCAP_MAGIC_NS) {
        this.format = 'pcap';
        this.le = false;
        this.pcapToMicros = be === PCAP_MAGIC_NS ? 1e-3 : 1;
      } else {
        throw new CaptureError(
          CaptureErrorCode.BAD_MAGIC,
          `not a pcap or pcapng file (starts with ${be.toString(16).padStart(8, '0')})`,
          this.fileOffset,
        );
      }
    }
    if (this.format === 'pcap') this.parsePcap();
    else this.parsePcapng();
  }

  private parsePcap(): void {
    if (!this.headerDone) {
      if (this.end_ - this.start < 24) return;
      // The link type's upper bits carry FCS information; the type is the low 16 bits.
      this.pcapLinkType = this.u32(this.start + 20) & 0xffff;
      this.headerDone = true;
      this.advance(24);
    }
    const max = this.limits.maxRecordBytes;
    while (this.end_ - this.start >= 16) {
      const o = this.start;
      const incl = this.u32(o + 8);
      const orig = this.u32(o + 12);
      if (incl > max) {
        throw new CaptureError(
          CaptureErrorCode.BAD_LENGTH,
          `packet record of ${incl} bytes exceeds the limit of ${max}`,
          this.fileOffset + 8,
        );
      }
      if (this.end_ - o < 16 + incl) return;
      const p = this.packet;
      p.timeUs = this.u32(o) * 1e6 + Math.floor(this.u32(o + 4) * this.pcapToMicros);
      p.linkType = this.pcapLinkType;
      p.data = this.acc.subarray(o + 16, o + 16 + incl);
      p.originalLength = orig;
      this.advance(16 + incl);
      this.packets++;
      this.onPacket(p);
    }
  }

  private parsePcapng(): void {
    const max = this.limits.maxRecordBytes;
    while (this.end_ - this.start >= 12) {
      const o = this.start;
      const typeBe = this.acc.readUInt32BE(o);
      if (typeBe === PCAPNG_SHB) {
        // A section header fixes the byte order for the blocks that follow.
        const bom = this.acc.readUInt32LE(o + 8);
        if (bom === PCAPNG_BYTE_ORDER) this.le = true;
        else if (this.acc.readUInt32BE(o + 8) === PCAPNG_BYTE_ORDER) this.le = false;
        else {
          throw new CaptureError(
            CaptureErrorCode.BAD_MAGIC,
            'pcapng section has no byte-order magic',
            this.fileOffset + 8,
          );
        }
        this.interfaces = [];
        this.headerDone = true;
      } else if (!this.headerDone) {
        throw new CaptureError(
          CaptureErrorCode.BAD_MAGIC,
          'pcapng file does not start with a section header',
          this.fileOffset,
        );
      }
      const type = this.u32(o);
      const total = this.u32(o + 4);
      if (total < 12 || total % 4 !== 0) {
        throw new CaptureError(
          CaptureErrorCode.BAD_LENGTH,
          `pcapng block length ${total} is invalid`,
          this.fileOffset + 4,
        );
      }
      if (total > max + 64) {
        throw new CaptureError(
          CaptureErrorCode.BAD_LENGTH,
          `pcapng block of ${total} bytes exceeds the limit of ${max}`,
          this.fileOffset + 4,
        );
      }
      if (this.end_ - o < total) return;
      if (this.u32(o + total - 4) !== total) {
        throw new CaptureError(
          CaptureErrorCode.BAD_LENGTH,
          'pcapng block length at its end differs from its start',
          this.fileOffset + total - 4,
        );
      }
      this.block(type, o, total);
      this.advance(total);
    }
  }

  private block(type: number, o: number, total: number): void {
    const bodyEnd = o + total - 4;
    if (type === 1) {
      // Interface description: link type, reserved, snap length, options.
      if (total < 20)
        throw new CaptureError(CaptureErrorCode.BAD_LENGTH, 'short interface block', this.fileOffset);
      if (this.interfaces.length >= this.limits.maxInterfaces) {
        throw new CaptureError(
          CaptureErrorCode.BAD_LENGTH,
          `more than ${this.limits.maxInterfaces} interfaces in a section`,
          this.fileOffset,
        );
      }
      const info: InterfaceInfo = { linkType: this.u16(o + 8), toMicros: 1 };
      let p = o + 16;
      while (p + 4 <= bodyEnd) {
        const code = this.u16(p);
        const len = this.u16(p + 2);
        if (code === 0) break;
        if (p + 4 + len > bodyEnd) {
          throw new CaptureError(
            CaptureErrorCode.BAD_LENGTH,
            'interface option runs past its block',
            this.fileOffset + p - o,
          );
        }
        if (code === 9 && len >= 1) {
          // if_tsresol: 10^-n or 2^-n seconds per unit.
          const v = this.acc[p + 4]!;
          const perSecond = v & 0x80 ? 2 ** (v & 0x7f) : 10 ** v;
          info.toMicros = 1e6 / perSecond;
        }
        p += 4 + ((len + 3) & ~3);
      }
      this.interfaces.push(info);
      return;
    }
    if (type === 6 || type === 2) {
      // Enhanced packet (6), or the obsolete packet block (2, whose interface id is a u16).
      if (total < 32)
        throw new CaptureError(CaptureErrorCode.BAD_LENGTH, 'short packet block', this.fileOffset);
      const ifId = type === 6 ? this.u32(o + 8) : this.u16(o + 8);
      const iface = this.interfaces[ifId];
      if (iface === undefined) {
        throw new CaptureError(
          CaptureErrorCode.BAD_INTERFACE,
          `packet on undescribed interface ${ifId}`,
          this.fileOffset + 8,
        );
      }
      const captured = this.u32(o + 20);
      if (28 + captured > total - 4) {
        throw new CaptureError(
          CaptureErrorCode.BAD_LENGTH,
          'packet data runs past its block',
          this.fileOffset + 20,
        );
      }
      const raw = this.u32(o + 12) * 4294967296 + this.u32(o + 16);
      const p = this.packet;
      p.timeUs = Math.floor(raw * iface.toMicros);
      p.linkType = iface.linkType;
      p.data = this.acc.subarray(o + 28, o + 28 + captured);
      p.originalLength = this.u32(o + 24);
      this.packets++;
      this.onPacket(p);
      return;
    }
    if (type === 3) {
      // Simple packet: interface 0, no timestamp; the data fills the block (minus padding).
      const iface = this.interfaces[0];
      if (iface === undefined)
        throw new CaptureError(
          CaptureErrorCode.BAD_INTERFACE,
          'simple packet without interface',
          this.fileOffset,
        );
      const orig = this.u32(o + 8);
      const captured = Math.min(orig, total - 16);
      const p = this.packet;
      p.timeUs = 0;
      p.linkType = iface.linkType;
      p.data = this.acc.subarray(o + 12, o + 12 + captured);
      p.originalLength = orig;
      this.packets++;
      this.onPacket(p);
    }
    // Other blocks (name resolution, statistics, custom) carry nothing the inspector shows.
  }
}

/** Parses a whole capture held in memory. */
export function readCapture(bytes: Buffer, onPacket: PacketHandler, limits?: Partial<CaptureLimits>): number {
  const parser = new CaptureParser(onPacket, limits);
  parser.push(bytes);
  parser.end();
  return parser.packets;
}
