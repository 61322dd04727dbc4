/**
 * Decoders for the transports game protocols ride on, shared by the protocols' inspectors and the
 * inspector itself: WebSocket framing (handing binary messages to the protocol inside), and TLS and
 * DTLS record headers (the contents are shown as encrypted, never guessed).
 */
import type { Json } from '../wire/codec.js';
import { DecodeError, ErrorCode } from '../wire/errors.js';
import { lengthPrefixed } from '../wire/framing.js';
import {
  type BaseDecoderOptions,
  type Emitter,
  type FlowDecoder,
  FramedDirection,
  noDatagrams,
  perDirection,
} from './flow.js';
import type { Direction } from './protocol.js';

// ---- WebSocket ---------------------------------------------------------------------------------

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
 * A WebSocket (RFC 6455) connection: the HTTP upgrade request and response (shown by their first
 * line), then frames; control frames and text messages are shown as such, and every binary
 * message is handed to `binary` (a protocol carried over WebSocket decodes it like a datagram).
 * Client frames are unmasked; fragmented messages are joined (bounded by `maxFrameBytes`).
 */
export function webSocketDecoder(
  out: Emitter,
  options: BaseDecoderOptions,
  binary: (direction: Direction, message: Buffer) => void,
): FlowDecoder {
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
        binary(d, payload);
      },
    );
    return dir;
  };
  const dirs = perDirection(make);
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

export function tlsDecoder(out: Emitter, options: BaseDecoderOptions): FlowDecoder {
  // Each direction encrypts after its own ChangeCipherSpec.
  const encrypted = { client: false, server: false };
  const measure = lengthPrefixed({ prefix: 'u16be', at: 3, counts: 'rest', maxFrameBytes: 18_437 + 5 });
  const dirs = perDirection(
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
