import { DecodeError, ErrorCode } from '../../wire/errors.js';
import {
  DTLS_1_0,
  DTLS_1_2,
  EMPTY_RENEGOTIATION_INFO_SCSV,
  ExtensionType,
  HANDSHAKE_HEADER_LENGTH,
  RANDOM_LENGTH,
  VERIFY_DATA_LENGTH,
} from './constants.js';

/** A bounds-checked big-endian cursor over one handshake body; every fault is a DecodeError. */
class Cursor {
  at: number;
  readonly buf: Buffer;
  readonly end: number;
  constructor(buf: Buffer, start: number, end: number) {
    this.buf = buf;
    this.at = start;
    this.end = end;
  }
  need(n: number, what: string): void {
    if (this.end - this.at < n)
      throw new DecodeError(ErrorCode.OVERRUN, `${what} runs past its message`, this.at);
  }
  u8(what: string): number {
    this.need(1, what);
    return this.buf[this.at++]!;
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.buf.readUInt16BE(this.at);
    this.at += 2;
    return v;
  }
  bytes(n: number, what: string): Buffer {
    this.need(n, what);
    const v = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return v;
  }
  /** A vector with a 1- or 2-byte length prefix; `max` bounds it before anything is taken. */
  vector(prefix: 1 | 2, max: number, what: string): Buffer {
    const n = prefix === 1 ? this.u8(what) : this.u16(what);
    if (n > max) throw new DecodeError(ErrorCode.TOO_LARGE, `${what} of ${n} bytes exceeds ${max}`, this.at);
    return this.bytes(n, what);
  }
  done(what: string): void {
    if (this.at !== this.end) throw new DecodeError(ErrorCode.TRAILING_BYTES, `bytes after ${what}`, this.at);
  }
}

/** One handshake message header (RFC 6347 §4.2.2), filled in place. */
export class HandshakeView {
  msgType = 0;
  length = 0;
  messageSeq = 0;
  fragmentOffset = 0;
  fragmentLength = 0;
  /** Offset of the fragment's bytes in the buffer, and just past them. */
  bodyStart = 0;
  end = 0;
  /** True when this fragment is the whole message. */
  get whole(): boolean {
    return this.fragmentOffset === 0 && this.fragmentLength === this.length;
  }
}

/** Reads the handshake header at `offset` of a record's plaintext; throws DecodeError if malformed. */
export function readHandshake(buf: Buffer, offset: number, end: number, view: HandshakeView): void {
  if (end - offset < HANDSHAKE_HEADER_LENGTH) {
    throw new DecodeError(ErrorCode.INCOMPLETE, 'handshake header is truncated', offset);
  }
  view.msgType = buf[offset]!;
  view.length = buf.readUIntBE(offset + 1, 3);
  view.messageSeq = buf.readUInt16BE(offset + 4);
  view.fragmentOffset = buf.readUIntBE(offset + 6, 3);
  view.fragmentLength = buf.readUIntBE(offset + 9, 3);
  view.bodyStart = offset + HANDSHAKE_HEADER_LENGTH;
  view.end = view.bodyStart + view.fragmentLength;
  if (view.end > end)
    throw new DecodeError(ErrorCode.OVERRUN, 'handshake fragment runs past its record', offset);
  if (view.fragmentOffset + view.fragmentLength > view.length) {
    throw new DecodeError('ERR_DTLS_BAD_FRAGMENT', 'handshake fragment runs past its message', offset);
  }
}

/** A whole handshake message with its 12-byte header in unfragmented form (RFC 6347 §4.2.6). */
export function handshakeMessage(msgType: number, messageSeq: number, body: Buffer): Buffer {
  const out = Buffer.allocUnsafe(HANDSHAKE_HEADER_LENGTH + body.length);
  out[0] = msgType;
  out.writeUIntBE(body.length, 1, 3);
  out.writeUInt16BE(messageSeq, 4);
  out.writeUIntBE(0, 6, 3);
  out.writeUIntBE(body.length, 9, 3);
  body.copy(out, HANDSHAKE_HEADER_LENGTH);
  return out;
}

export interface ClientHello {
  clientVersion: number;
  random: Buffer;
  sessionId: Buffer;
  cookie: Buffer;
  /** The body without the cookie vector: what the cookie's MAC covers. */
  beforeCookie: Buffer;
  afterCookie: Buffer;
  /** Raw cipher suite list (2 bytes each). */
  cipherSuites: Buffer;
  offersNullCompression: boolean;
  extendedMasterSecret: boolean;
  /** The client signalled RFC 5746 support (SCSV or an empty renegotiation_info). */
  secureRenegotiation: boolean;
  /** renegotiation_info with a non-empty renegotiated_connection on an initial handshake. */
  badRenegotiationInfo: boolean;
}

/** Parses a ClientHello body (RFC 5246 §7.4.1.2 with the DTLS cookie, RFC 6347 §4.2.1). */
export function parseClientHello(buf: Buffer): ClientHello {
  const c = new Cursor(buf, 0, buf.length);
  const clientVersion = c.u16('client_version');
  const random = c.bytes(RANDOM_LENGTH, 'random');
  const sessionId = c.vector(1, 32, 'session_id');
  const cookieStart = c.at;
  const cookie = c.vector(1, 255, 'cookie');
  const cookieEnd = c.at;
  const cipherSuites = c.vector(2, 0xfffe, 'cipher_suites');
  if (cipherSuites.length === 0 || cipherSuites.length % 2 !== 0) {
    throw new DecodeError(ErrorCode.BAD_LENGTH, 'cipher_suites length must be even and non-zero', cookieEnd);
  }
  const compression = c.vector(1, 255, 'compression_methods');
  let extendedMasterSecret = false;
  let secureRenegotiation = false;
  let badRenegotiationInfo = false;
  for (let i = 0; i < cipherSuites.length; i += 2) {
    if (cipherSuites.readUInt16BE(i) === EMPTY_RENEGOTIATION_INFO_SCSV) secureRenegotiation = true;
  }
  if (c.at < c.end) {
    const extensions = c.vector(2, 0xffff, 'extensions');
    c.done('extensions');
    const e = new Cursor(extensions, 0, extensions.length);
    while (e.at < e.end) {
      const type = e.u16('extension type');
      const data = e.vector(2, 0xffff, 'extension data');
      if (type === ExtensionType.extendedMasterSecret) {
        extendedMasterSecret = true;
      } else if (type === ExtensionType.renegotiationInfo) {
        secureRenegotiation = true;
        if (data.length !== 1 || data[0] !== 0) badRenegotiationInfo = true;
      }
    }
  }
  return {
    clientVersion,
    random,
    sessionId,
    cookie,
    beforeCookie: buf.subarray(0, cookieStart),
    afterCookie: buf.subarray(cookieEnd),
    cipherSuites,
    offersNullCompression: compression.includes(0),
    extendedMasterSecret,
    secureRenegotiation,
    badRenegotiationInfo,
  };
}

/** The server's first pick from its own preference list that the client offers. */
export function chooseSuite(preference: readonly number[], offered: Buffer): number | undefined {
  for (const id of preference) {
    for (let i = 0; i + 1 < offered.length; i += 2) {
      if (offered.readUInt16BE(i) === id) return id;
    }
  }
  return undefined;
}

/** HelloVerifyRequest body: server_version 0xfeff (RFC 6347 §4.2.1) and the cookie. */
export function helloVerifyRequestBody(cookie: Buffer): Buffer {
  const out = Buffer.allocUnsafe(3 + cookie.length);
  out.writeUInt16BE(DTLS_1_0, 0);
  out[2] = cookie.length;
  cookie.copy(out, 3);
  return out;
}

export function parseHelloVerifyRequest(buf: Buffer): { cookie: Buffer } {
  const c = new Cursor(buf, 0, buf.length);
  c.u16('server_version');
  const cookie = c.vector(1, 255, 'cookie');
  c.done('HelloVerifyRequest');
  return { cookie };
}

/** ServerHello body: DTLS 1.2, no session id (no resumption), no compression, only the extensions we honour. */
export function serverHelloBody(
  random: Buffer,
  suite: number,
  extendedMasterSecret: boolean,
  secureRenegotiation: boolean,
): Buffer {
  const extensions: Buffer[] = [];
  if (secureRenegotiation) extensions.push(Buffer.from([0xff, 0x01, 0x00, 0x01, 0x00]));
  if (extendedMasterSecret) extensions.push(Buffer.from([0x00, 0x17, 0x00, 0x00]));
  const extLength = extensions.reduce((n, e) => n + e.length, 0);
  const head = Buffer.allocUnsafe(2 + RANDOM_LENGTH + 1 + 2 + 1);
  head.writeUInt16BE(DTLS_1_2, 0);
  random.copy(head, 2);
  head[34] = 0;
  head.writeUInt16BE(suite, 35);
  head[37] = 0;
  if (extensions.length === 0) return head;
  const len = Buffer.allocUnsafe(2);
  len.writeUInt16BE(extLength, 0);
  return Buffer.concat([head, len, ...extensions]);
}

export interface ServerHello {
  serverVersion: number;
  random: Buffer;
  suite: number;
  compression: number;
  extendedMasterSecret: boolean;
  secureRenegotiation: boolean;
}

export function parseServerHello(buf: Buffer): ServerHello {
  const c = new Cursor(buf, 0, buf.length);
  const serverVersion = c.u16('server_version');
  const random = c.bytes(RANDOM_LENGTH, 'random');
  c.vector(1, 32, 'session_id');
  const suite = c.u16('cipher_suite');
  const compression = c.u8('compression_method');
  let extendedMasterSecret = false;
  let secureRenegotiation = false;
  if (c.at < c.end) {
    const extensions = c.vector(2, 0xffff, 'extensions');
    c.done('ServerHello');
    const e = new Cursor(extensions, 0, extensions.length);
    while (e.at < e.end) {
      const type = e.u16('extension type');
      e.vector(2, 0xffff, 'extension data');
      if (type === ExtensionType.extendedMasterSecret) extendedMasterSecret = true;
      if (type === ExtensionType.renegotiationInfo) secureRenegotiation = true;
    }
  }
  return { serverVersion, random, suite, compression, extendedMasterSecret, secureRenegotiation };
}

/** ClientHello body as our client sends it: no session id, SCSV, and EMS when asked. */
export function clientHelloBody(
  random: Buffer,
  cookie: Buffer,
  suites: readonly number[],
  ems: boolean,
): Buffer {
  const suiteBytes = Buffer.allocUnsafe(2 * (suites.length + 1));
  suites.forEach((s, i) => {
    suiteBytes.writeUInt16BE(s, 2 * i);
  });
  suiteBytes.writeUInt16BE(EMPTY_RENEGOTIATION_INFO_SCSV, 2 * suites.length);
  const parts: Buffer[] = [
    Buffer.from([DTLS_1_2 >> 8, DTLS_1_2 & 0xff]),
    random,
    Buffer.from([0, cookie.length]),
    cookie,
    Buffer.from([suiteBytes.length >> 8, suiteBytes.length & 0xff]),
    suiteBytes,
    Buffer.from([1, 0]),
  ];
  if (ems) parts.push(Buffer.from([0x00, 0x04, 0x00, 0x17, 0x00, 0x00]));
  return Buffer.concat(parts);
}

/** ClientKeyExchange for plain PSK (RFC 4279 §2): psk_identity<0..2^16-1>. */
export function clientKeyExchangeBody(identity: Buffer): Buffer {
  const out = Buffer.allocUnsafe(2 + identity.length);
  out.writeUInt16BE(identity.length, 0);
  identity.copy(out, 2);
  return out;
}

export function parseClientKeyExchange(buf: Buffer): Buffer {
  const c = new Cursor(buf, 0, buf.length);
  const identity = c.vector(2, 0xffff, 'psk_identity');
  c.done('ClientKeyExchange');
  return identity;
}

export function parseFinished(buf: Buffer): Buffer {
  if (buf.length !== VERIFY_DATA_LENGTH) {
    throw new DecodeError(ErrorCode.BAD_LENGTH, `Finished must be ${VERIFY_DATA_LENGTH} bytes`, 0);
  }
  return buf;
}

/**
 * Reassembles one fragmented handshake message (RFC 6347 §4.2.3) into a buffer sized from the
 * message's declared length, only after that length was checked against `maxBytes`.
 */
export class Reassembler {
  #msgType = -1;
  #messageSeq = -1;
  #body: Buffer | undefined;
  #have: Uint8Array | undefined;
  #missing = 0;

  readonly maxBytes: number;
  constructor(maxBytes: number) {
    this.maxBytes = maxBytes;
  }

  /**
   * Adds one fragment of message `messageSeq`. Returns the whole body once every byte arrived,
   * else undefined. Throws DecodeError when the message is larger than `maxBytes` or a fragment
   * contradicts an earlier one (type or total length).
   */
  add(buf: Buffer, h: HandshakeView): Buffer | undefined {
    if (h.length > this.maxBytes) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `handshake message of ${h.length} bytes exceeds ${this.maxBytes}`,
        0,
      );
    }
    if (h.whole) {
      this.reset();
      return buf.subarray(h.bodyStart, h.end);
    }
    if (this.#messageSeq !== h.messageSeq || this.#body === undefined) {
      this.#msgType = h.msgType;
      this.#messageSeq = h.messageSeq;
      this.#body = Buffer.alloc(h.length);
      this.#have = new Uint8Array(h.length);
      this.#missing = h.length;
    } else if (this.#msgType !== h.msgType || this.#body.length !== h.length) {
      this.reset();
      throw new DecodeError('ERR_DTLS_BAD_FRAGMENT', 'fragments of one message disagree', 0);
    }
    const have = this.#have!;
    buf.copy(this.#body, h.fragmentOffset, h.bodyStart, h.end);
    for (let i = h.fragmentOffset; i < h.fragmentOffset + h.fragmentLength; i++) {
      if (have[i] === 0) {
        have[i] = 1;
        this.#missing--;
      }
    }
    if (this.#missing > 0) return undefined;
    const body = this.#body;
    this.reset();
    return body;
  }

  reset(): void {
    this.#msgType = -1;
    this.#messageSeq = -1;
    this.#body = undefined;
    this.#have = undefined;
    this.#missing = 0;
  }
}
