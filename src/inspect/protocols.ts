/**
 * Stateful per-flow decoders, one per protocol, built on each protocol's exported declarations
 * and framing. A decoder receives a TCP direction's bytes in order (with gaps announced) or
 * whole datagrams, and emits one record per message, or a typed error with its offset (counted
 * from the start of that direction's stream, or of the datagram).
 *
 * - JS5: handshake, 4-byte requests; downstream the handshake reply then framed responses
 *   (0xFF block markers), XORed with the key of the last rekey request seen before the bytes.
 * - RMC over TCP: u32le-framed packets, decoded with the `rmc` codec (named args when declared).
 * - NoxVR: packets over TCP and UDP; Segmentation sessions are reassembled and Reliable batches
 *   unpacked, each inner packet emitted on its own.
 * - Unity Relay: one message per datagram (RELAY payloads as hex).
 * - TLS/DTLS: record headers only; the contents are shown as encrypted, never guessed.
 */
import type { Direction } from '../core/protocol.js';
import { responseMeasure, xorInPlace } from '../protocols/js5/framing.js';
import {
  Handshake,
  HandshakeReply,
  HandshakeSeeded,
  INIT_JS5_OPCODE,
  Js5Request,
  Js5Response,
} from '../protocols/js5/messages.js';
import { clientMessages, serverMessages } from '../protocols/nox-relay/messages.js';
import {
  packetMeasure,
  readClientPacket,
  readServerPacket,
  splitPackets,
} from '../protocols/nox-relay/packet.js';
import { decodeStream as decodeRmcStream } from '../protocols/rmc/codec.js';
import type { RmcVariant } from '../protocols/rmc/messages.js';
import { decodeAll as decodeRelay } from '../protocols/unity-relay/codec.js';
import { RelayMessages } from '../protocols/unity-relay/messages.js';
import { decode, type Json } from '../wire/codec.js';
import { asDecodeError, DecodeError, ErrorCode } from '../wire/errors.js';
import { type FrameMeasure, fixedFrames, lengthPrefixed, StreamDeframer } from '../wire/framing.js';
import { WireReader } from '../wire/reader.js';
import { prudpDecoder } from './prudp.js';

/** Where a decoder sends what it found. */
export interface Emitter {
  message(direction: Direction, message: Json): void;
  error(direction: Direction, error: DecodeError): void;
}

export interface FlowDecoder {
  /** In-order TCP bytes of one direction at stream offset `offset` (a view: copy to keep). */
  stream(direction: Direction, bytes: Buffer, offset: number): void;
  /** A whole UDP datagram. */
  datagram(direction: Direction, payload: Buffer): void;
  /** Bytes of a TCP direction that were never captured. */
  gap(direction: Direction, offset: number, length: number): void;
}

export interface DecoderOptions {
  /** RMC envelope variant. */
  rmcVariant: RmcVariant;
  /** JS5 handshakes carry the 16-byte seed (OSRS ≥ 223). */
  js5Seeded: boolean;
  /** Largest frame any stream decoder accepts. */
  maxFrameBytes: number;
  /** NoxVR: segmentation sessions held per flow and direction. */
  maxSegmentSessions: number;
  /** NoxVR: largest reassembled packet. */
  maxReassembledBytes: number;
  /** PRUDP: the game's access key (checksums); without it PRUDP packets are not decoded. */
  prudpAccessKey: string | undefined;
  /** PRUDP checksum width: 1 (classic) or 4 bytes. */
  prudpChecksum: 1 | 4;
}

export const DEFAULT_DECODER_OPTIONS: DecoderOptions = {
  rmcVariant: 'hyperscape',
  js5Seeded: false,
  maxFrameBytes: 16 << 20,
  maxSegmentSessions: 64,
  maxReassembledBytes: 0xffff,
  prudpAccessKey: undefined,
  prudpChecksum: 1,
};

export const GAP_ERROR = 'ERR_INSPECT_GAP';
export const STREAM_ERROR = 'ERR_INSPECT_DESYNC';

/**
 * One TCP direction cut into frames by a measure. A malformed frame header, or a gap, leaves
 * the direction unreadable (a byte stream cannot be resynchronised without guessing): the error
 * is emitted once and later bytes are skipped.
 */
class FramedDirection {
  private readonly deframer: StreamDeframer;
  private dead = false;
  private readonly direction: Direction;
  private readonly out: Emitter;
  private readonly onFrame: (buf: Buffer, start: number, end: number) => void;

  constructor(
    direction: Direction,
    out: Emitter,
    measure: FrameMeasure,
    maxFrameBytes: number,
    decodeFrame: (frame: Buffer, frameOffset: number) => void,
  ) {
    this.direction = direction;
    this.out = out;
    this.deframer = new StreamDeframer(measure, { maxFrameBytes, maxBufferedBytes: maxFrameBytes + 65_536 });
    this.onFrame = (buf, start, end) => {
      const frameOffset = this.deframer.consumed - (end - start);
      try {
        decodeFrame(buf.subarray(start, end), frameOffset);
      } catch (e) {
        this.out.error(this.direction, asDecodeError(e, 0).atBase(frameOffset));
      }
    };
  }

  setMeasure(measure: FrameMeasure): void {
    this.deframer.setMeasure(measure);
  }

  push(bytes: Buffer): void {
    if (this.dead) return;
    try {
      this.deframer.push(bytes, this.onFrame);
    } catch (e) {
      this.dead = true;
      this.out.error(this.direction, asDecodeError(e, 0));
    }
  }

  gap(offset: number, length: number): void {
    if (this.dead) return;
    this.dead = true;
    this.out.error(
      this.direction,
      new DecodeError(
        GAP_ERROR,
        `${length} byte(s) missing from the capture; the rest of this direction is skipped`,
        offset,
      ),
    );
  }
}

function pair<T>(make: (d: Direction) => T): Record<Direction, T> {
  return { client: make('client'), server: make('server') };
}

function noDatagrams(out: Emitter, name: string): (d: Direction, p: Buffer) => void {
  return (d) => out.error(d, new DecodeError(ErrorCode.BAD_INPUT, `${name} does not run over UDP`, 0));
}

// ---- JS5 -------------------------------------------------------------------------------------

export function js5Decoder(out: Emitter, options: DecoderOptions): FlowDecoder {
  let xorKey = 0;
  let sawHandshake = false;
  let replyPending = false;
  const requests = fixedFrames(4);
  const response = responseMeasure(options.maxFrameBytes);
  const handshakeLength = options.js5Seeded ? 21 : 5;
  const dirs = pair((d) =>
    d === 'client'
      ? new FramedDirection(
          d,
          out,
          (buf, off, avail) => {
            if (avail < 1) return -1;
            return buf[off] === INIT_JS5_OPCODE && !sawHandshake ? handshakeLength : 4;
          },
          options.maxFrameBytes,
          (frame) => {
            if (!sawHandshake && frame[0] === INIT_JS5_OPCODE && frame.length === handshakeLength) {
              sawHandshake = true;
              replyPending = true;
              dirs.client.setMeasure(requests);
              const hs = options.js5Seeded ? HandshakeSeeded : Handshake;
              out.message('client', hs.toJson(decode(hs as never, frame)) as Json);
              return;
            }
            sawHandshake = true;
            const req = decode(Js5Request, frame);
            if (req.type === 'rekey') xorKey = req.key;
            out.message('client', Js5Request.toJson(req));
          },
        )
      : new FramedDirection(
          d,
          out,
          (buf, off, avail) => (replyPending ? (avail < 1 ? -1 : 1) : response(buf, off, avail)),
          options.maxFrameBytes,
          (frame) => {
            if (replyPending) {
              replyPending = false;
              out.message('server', HandshakeReply.toJson(decode(HandshakeReply, frame)));
              return;
            }
            out.message('server', Js5Response.toJson(decode(Js5Response, frame)));
          },
        ),
  );
  return {
    stream(d, bytes) {
      if (d === 'server' && xorKey !== 0) {
        // Every downstream byte after a rekey is XORed (markers and headers too); work on a copy.
        const copy = Buffer.from(bytes);
        xorInPlace(copy, xorKey);
        dirs.server.push(copy);
      } else dirs[d].push(bytes);
    },
    datagram: noDatagrams(out, 'JS5'),
    gap(d, offset, length) {
      dirs[d].gap(offset, length);
    },
  };
}

// ---- RMC over TCP ----------------------------------------------------------------------------

export function rmcDecoder(out: Emitter, options: DecoderOptions): FlowDecoder {
  const measure = lengthPrefixed({
    prefix: 'u32le',
    counts: 'rest',
    maxFrameBytes: options.maxFrameBytes,
    minFrameBytes: options.rmcVariant === 'classic' ? 6 : 7,
  });
  const dirs = pair(
    (d) =>
      new FramedDirection(d, out, measure, options.maxFrameBytes, (frame) => {
        for (const m of decodeRmcStream(frame, options.rmcVariant)) out.message(d, m);
      }),
  );
  return {
    stream(d, bytes) {
      dirs[d].push(bytes);
    },
    datagram: noDatagrams(out, 'RMC over TCP'),
    gap(d, offset, length) {
      dirs[d].gap(offset, length);
    },
  };
}

// ---- NoxVR -----------------------------------------------------------------------------------

/** The end of a Handshake packet followed only by zero bytes (padding), or -1. */
function paddedHandshakeEnd(b: Buffer): number {
  if (b.length < 5 || b[4] !== 0x01) return -1;
  const len = b.readUInt16BE(0);
  if (len < 5 || len > b.length) return -1;
  for (let i = len; i < b.length; i++) if (b[i] !== 0) return -1;
  return len;
}

interface SegmentSession {
  total: number;
  parts: Map<number, Buffer>;
  bytes: number;
}

export function noxDecoder(out: Emitter, options: DecoderOptions): FlowDecoder {
  const reader = new WireReader();
  const ranges: number[] = [];
  const udpMeasure = packetMeasure(0xffff);
  const sessions = pair(() => new Map<number, SegmentSession>());

  /** Decodes one whole packet `buf[start, end)`; nested packets recurse (bounded by size). */
  const packet = (
    d: Direction,
    buf: Buffer,
    start: number,
    end: number,
    base: number,
    depth: number,
  ): void => {
    reader.reset(buf, start, end);
    let p: { uid: number; message: any };
    try {
      p = d === 'client' ? readClientPacket(reader) : readServerPacket(reader);
    } catch (e) {
      out.error(d, asDecodeError(e, reader.offset).atBase(base - start));
      return;
    }
    const union = d === 'client' ? clientMessages : serverMessages;
    const { type, ...fields } = union.toJson(p.message as never) as Record<string, Json>;
    out.message(d, { type: type!, uid: p.uid, ...fields });
    if (depth > 4) return;
    const m = p.message;
    if (m.type === 'Reliable') {
      for (const inner of m.messages as Buffer[]) {
        if (inner.length < 5) continue;
        packet(d, inner, 0, inner.length, base, depth + 1);
      }
    } else if (m.type === 'Segmentation') {
      const reassembled = segment(d, m.segmentId, m.totalSegments, m.currentSegment, m.segmentData);
      if (reassembled !== undefined) packet(d, reassembled, 0, reassembled.length, base, depth + 1);
    }
  };

  const segment = (
    d: Direction,
    id: number,
    total: number,
    index: number,
    data: Buffer,
  ): Buffer | undefined => {
    const map = sessions[d];
    if (total === 0 || index >= total) {
      out.error(d, new DecodeError(ErrorCode.BAD_VALUE, `segment ${index} of ${total} is out of range`, 0));
      return undefined;
    }
    let s = map.get(id);
    if (s === undefined) {
      if (map.size >= options.maxSegmentSessions) map.delete(map.keys().next().value!);
      s = { total, parts: new Map(), bytes: 0 };
      map.set(id, s);
    }
    const previous = s.parts.get(index);
    s.bytes += data.length - (previous?.length ?? 0);
    if (s.bytes > options.maxReassembledBytes) {
      map.delete(id);
      out.error(
        d,
        new DecodeError(
          ErrorCode.TOO_LARGE,
          `segmented packet ${id} exceeds ${options.maxReassembledBytes} bytes`,
          0,
        ),
      );
      return undefined;
    }
    s.parts.set(index, Buffer.from(data));
    if (s.parts.size < s.total) return undefined;
    map.delete(id);
    const parts: Buffer[] = [];
    for (let i = 0; i < s.total; i++) parts.push(s.parts.get(i)!);
    return Buffer.concat(parts);
  };

  const tcp = pair(
    (d) =>
      new FramedDirection(
        d,
        out,
        packetMeasure(Math.min(0xffff, options.maxFrameBytes)),
        0xffff,
        (frame, at) => packet(d, frame, 0, frame.length, at, 0),
      ),
  );
  return {
    stream(d, bytes) {
      tcp[d].push(bytes);
    },
    datagram(d, payload) {
      try {
        splitPackets(payload, 0, payload.length, udpMeasure, ranges);
      } catch (e) {
        // A first Handshake may be padded with zero bytes up to the size of its reply.
        const end = paddedHandshakeEnd(payload);
        if (end < 0) {
          out.error(d, asDecodeError(e, 0));
          return;
        }
        packet(d, payload, 0, end, 0, 0);
        return;
      }
      // `ranges` is reused by nested decodes only through this loop's copy.
      const list = ranges.slice();
      for (let i = 0; i < list.length; i += 2) packet(d, payload, list[i]!, list[i + 1]!, list[i]!, 0);
    },
    gap(d, offset, length) {
      tcp[d].gap(offset, length);
    },
  };
}

// ---- Unity Relay -----------------------------------------------------------------------------

export function unityRelayDecoder(out: Emitter, options: DecoderOptions): FlowDecoder {
  const dtls = dtlsDecoder(out);
  // Over TCP, Unity Relay runs inside a WebSocket (the relay's ws endpoint).
  let ws: FlowDecoder | undefined;
  return {
    stream(d, bytes, offset) {
      ws ??= webSocketRelayDecoder(out, options);
      ws.stream(d, bytes, offset);
    },
    datagram(d, payload) {
      if (looksLikeDtls(payload)) {
        dtls.datagram(d, payload);
        return;
      }
      let messages: ReturnType<typeof decodeRelay>;
      try {
        messages = decodeRelay(payload);
      } catch (e) {
        out.error(d, asDecodeError(e, 0));
        return;
      }
      for (const m of messages) out.message(d, RelayMessages.toJson(m));
    },
    gap(d, offset, length) {
      ws?.gap(d, offset, length);
    },
  };
}

// ---- WebSocket (Unity Relay over ws://) ---------------------------------------------------------

const WS_OPCODES: Record<number, string> = {
  0: 'continuation',
  1: 'text',
  2: 'binary',
  8: 'close',
  9: 'ping',
  10: 'pong',
};
const MAX_HTTP_HEAD = 16 * 1024;

/**
 * Unity Relay over a WebSocket (RFC 6455): the HTTP upgrade request and response (shown by their
 * first line), then frames; every binary message is one relay message, decoded like a datagram.
 * Client frames are unmasked; fragmented messages are joined (bounded by `maxFrameBytes`).
 */
export function webSocketRelayDecoder(out: Emitter, options: DecoderOptions): FlowDecoder {
  const make = (d: Direction): FramedDirection => {
    let http = true;
    let fragments: Buffer[] = [];
    let fragmentBytes = 0;
    let fragmentOpcode = 0;
    const dir: FramedDirection = new FramedDirection(
      d,
      out,
      (buf, off, avail) => {
        if (http) {
          const end = buf.subarray(off, off + Math.min(avail, MAX_HTTP_HEAD)).indexOf('\r\n\r\n');
          if (end >= 0) return end + 4;
          if (avail >= MAX_HTTP_HEAD) {
            throw new DecodeError(ErrorCode.TOO_LARGE, `HTTP head longer than ${MAX_HTTP_HEAD} bytes`, off);
          }
          return -1;
        }
        if (avail < 2) return -1;
        const b1 = buf[off + 1]!;
        let len = b1 & 0x7f;
        let head = 2;
        if (len === 126) {
          if (avail < 4) return -1;
          len = buf.readUInt16BE(off + 2);
          head = 4;
        } else if (len === 127) {
          if (avail < 10) return -1;
          const big = buf.readBigUInt64BE(off + 2);
          if (big > BigInt(options.maxFrameBytes)) {
            throw new DecodeError(ErrorCode.TOO_LARGE, `WebSocket frame of ${big} bytes`, off + 2);
          }
          len = Number(big);
          head = 10;
        }
        if (b1 & 0x80) head += 4;
        return head + len;
      },
      options.maxFrameBytes + 14,
      (frame) => {
        if (http) {
          http = false;
          const line = frame.subarray(0, frame.indexOf('\r\n')).toString('latin1');
          out.message(d, { type: d === 'client' ? 'http-request' : 'http-response', line });
          return;
        }
        const fin = (frame[0]! & 0x80) !== 0;
        const opcode = frame[0]! & 0x0f;
        const b1 = frame[1]!;
        let p = 2;
        const len7 = b1 & 0x7f;
        if (len7 === 126) p = 4;
        else if (len7 === 127) p = 10;
        let payload: Buffer;
        if (b1 & 0x80) {
          const key = frame.subarray(p, p + 4);
          p += 4;
          payload = Buffer.from(frame.subarray(p));
          for (let i = 0; i < payload.length; i++) payload[i]! ^= key[i & 3]!;
        } else payload = frame.subarray(p);
        if (opcode >= 8) {
          const m: Record<string, Json> = { type: `ws-${WS_OPCODES[opcode] ?? opcode}` };
          if (opcode === 8 && payload.length >= 2) {
            m.code = payload.readUInt16BE(0);
            m.reason = payload.subarray(2).toString('utf8');
          } else m.data = payload.toString('hex');
          out.message(d, m);
          return;
        }
        if (opcode !== 0) fragmentOpcode = opcode;
        if (!fin || fragments.length > 0) {
          fragmentBytes += payload.length;
          if (fragmentBytes > options.maxFrameBytes) {
            fragments = [];
            fragmentBytes = 0;
            throw new DecodeError(ErrorCode.TOO_LARGE, 'fragmented WebSocket message over the limit', 0);
          }
          fragments.push(Buffer.from(payload));
          if (!fin) return;
          payload = Buffer.concat(fragments);
          fragments = [];
          fragmentBytes = 0;
        }
        if (fragmentOpcode === 1) {
          out.message(d, { type: 'ws-text', text: payload.toString('utf8') });
          return;
        }
        for (const m of decodeRelay(payload)) out.message(d, RelayMessages.toJson(m));
      },
    );
    return dir;
  };
  const dirs = pair(make);
  return {
    stream(d, bytes) {
      dirs[d].push(bytes);
    },
    datagram: noDatagrams(out, 'WebSocket'),
    gap(d, offset, length) {
      dirs[d].gap(offset, length);
    },
  };
}

// ---- TLS / DTLS records ----------------------------------------------------------------------

const CONTENT_TYPES: Record<number, string> = {
  20: 'change_cipher_spec',
  21: 'alert',
  22: 'handshake',
  23: 'application_data',
  25: 'ack',
};

const HANDSHAKE_TYPES: Record<number, string> = {
  0: 'hello_request',
  1: 'client_hello',
  2: 'server_hello',
  3: 'hello_verify_request',
  4: 'new_session_ticket',
  11: 'certificate',
  12: 'server_key_exchange',
  13: 'certificate_request',
  14: 'server_hello_done',
  15: 'certificate_verify',
  16: 'client_key_exchange',
  20: 'finished',
};

function versionName(major: number, minor: number): string {
  if (major === 0xfe)
    return minor === 0xff ? 'DTLS 1.0' : minor === 0xfd ? 'DTLS 1.2' : `DTLS ${major}.${minor}`;
  if (major === 3) return minor === 0 ? 'SSL 3.0' : `TLS 1.${minor - 1}`;
  return `${major}.${minor}`;
}

export function looksLikeDtls(p: Buffer): boolean {
  return p.length >= 13 && p[0]! >= 20 && p[0]! <= 25 && p[1] === 0xfe && (p[2] === 0xff || p[2] === 0xfd);
}

export function looksLikeTls(p: Buffer): boolean {
  return p.length >= 5 && p[0]! >= 20 && p[0]! <= 23 && p[1] === 3 && p[2]! <= 4;
}

/** A record's JSON: header fields; the body only as a handshake type when it is in clear. */
function recordJson(
  type: number,
  version: string,
  length: number,
  body: Buffer,
  clear: boolean,
): Record<string, Json> {
  const out: Record<string, Json> = { type: CONTENT_TYPES[type] ?? `content_${type}`, version, length };
  if (clear && type === 22 && body.length >= 1) out.handshakeType = HANDSHAKE_TYPES[body[0]!] ?? body[0]!;
  else if (type === 20 && body.length === 1) out.value = body[0]!;
  else out.encrypted = true;
  return out;
}

export function dtlsDecoder(out: Emitter): FlowDecoder {
  return {
    stream(d) {
      out.error(d, new DecodeError(ErrorCode.BAD_INPUT, 'DTLS travels over UDP', 0));
    },
    datagram(d, p) {
      let o = 0;
      while (o < p.length) {
        if (p.length - o < 13) {
          out.error(d, new DecodeError(ErrorCode.INCOMPLETE, 'DTLS record header cut short', o));
          return;
        }
        const type = p[o]!;
        const epoch = p.readUInt16BE(o + 3);
        const sequence = p.readUIntBE(o + 5, 6);
        const length = p.readUInt16BE(o + 11);
        if (o + 13 + length > p.length) {
          out.error(
            d,
            new DecodeError(ErrorCode.INCOMPLETE, `DTLS record of ${length} bytes cut short`, o + 11),
          );
          return;
        }
        const rec = recordJson(
          type,
          versionName(p[o + 1]!, p[o + 2]!),
          length,
          p.subarray(o + 13, o + 13 + length),
          epoch === 0,
        );
        out.message(d, { ...rec, epoch, sequence });
        o += 13 + length;
      }
    },
    gap() {},
  };
}

export function tlsDecoder(out: Emitter, options: DecoderOptions): FlowDecoder {
  // Each direction encrypts after its own ChangeCipherSpec.
  const encrypted = { client: false, server: false };
  const measure = lengthPrefixed({ prefix: 'u16be', at: 3, counts: 'rest', maxFrameBytes: 18_437 + 5 });
  const dirs = pair(
    (d) =>
      new FramedDirection(d, out, measure, options.maxFrameBytes, (frame) => {
        const type = frame[0]!;
        if (type < 20 || type > 25 || frame[1] !== 3) {
          throw new DecodeError(ErrorCode.BAD_VALUE, `not a TLS record (type ${type})`, 0);
        }
        out.message(
          d,
          recordJson(
            type,
            versionName(frame[1]!, frame[2]!),
            frame.length - 5,
            frame.subarray(5),
            !encrypted[d],
          ),
        );
        if (type === 20) encrypted[d] = true;
      }),
  );
  return {
    stream(d, bytes) {
      dirs[d].push(bytes);
    },
    datagram: noDatagrams(out, 'TLS'),
    gap(d, offset, length) {
      dirs[d].gap(offset, length);
    },
  };
}

// ---- the table of protocols ------------------------------------------------------------------

export interface ProtocolEntry {
  name: string;
  tcpPorts: readonly number[];
  udpPorts: readonly number[];
  create(out: Emitter, options: DecoderOptions): FlowDecoder;
  /**
   * Content detection on the first bytes one side sent (TCP stream start or a datagram):
   * returns who sent them, or undefined when they are not this protocol.
   */
  detect?(transport: 'tcp' | 'udp', first: Buffer): Direction | undefined;
}

function noxLooksLike(b: Buffer): boolean {
  if (b.length < 5) return false;
  const len = b.readUInt16BE(0);
  return len >= 5 && len <= b.length && b[4]! <= 0x12;
}

export const PROTOCOLS: readonly ProtocolEntry[] = [
  {
    name: 'js5',
    tcpPorts: [43594],
    udpPorts: [],
    create: js5Decoder,
    detect: (tr, b) =>
      tr === 'tcp' &&
      b[0] === INIT_JS5_OPCODE &&
      (b.length === 5 || b.length === 21 || (b.length - 5) % 4 === 0)
        ? 'client'
        : undefined,
  },
  {
    name: 'rmc',
    tcpPorts: [9103],
    udpPorts: [],
    create: rmcDecoder,
    detect: (tr, b) =>
      tr === 'tcp' &&
      b.length >= 11 &&
      b.readUInt32LE(0) + 4 <= b.length &&
      b.readUInt32LE(0) >= 7 &&
      (b[4]! & 0x80) !== 0
        ? 'client'
        : undefined,
  },
  {
    name: 'unity-relay',
    // 37000 UDP, 37001 DTLS, 37002 WebSocket (37003, wss, is TLS: records only).
    tcpPorts: [37002],
    udpPorts: [37000, 37001],
    create: unityRelayDecoder,
    detect: (tr, b) => {
      if (tr !== 'udp' || b.length < 4 || b[0] !== 0xda || b[1] !== 0x72 || b[2] !== 0) return undefined;
      // BIND_RECEIVED, ACCEPTED, REJECTED and ERROR come only from the relay.
      return b[3] === 1 || b[3] === 6 || b[3] === 8 || b[3] === 12 ? 'server' : 'client';
    },
  },
  {
    name: 'nox-relay',
    tcpPorts: [23032],
    udpPorts: [23032],
    create: noxDecoder,
    // A client opens with a Handshake (type 0x01).
    detect: (_tr, b) => (noxLooksLike(b) && b[4] === 0x01 ? 'client' : undefined),
  },
  {
    name: 'prudp',
    tcpPorts: [],
    // The RMC server's PRUDP transport shares its port number with RMC over TCP.
    udpPorts: [9103],
    create: prudpDecoder,
  },
  {
    name: 'tls',
    tcpPorts: [37003],
    udpPorts: [],
    create: tlsDecoder,
    detect: (tr, b) => (tr === 'tcp' && looksLikeTls(b) && b[5] === 1 ? 'client' : undefined),
  },
  {
    name: 'dtls',
    tcpPorts: [],
    udpPorts: [],
    create: (out) => dtlsDecoder(out),
    detect: (tr, b) => (tr === 'udp' && looksLikeDtls(b) && b[13] === 1 ? 'client' : undefined),
  },
];

export function findProtocol(name: string): ProtocolEntry | undefined {
  return PROTOCOLS.find((p) => p.name === name);
}
