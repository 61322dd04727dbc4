/**
 * Classic Rendez-Vous Kerberos, as the Ubisoft V0 titles use it.
 *
 * - A user's key is MD5 applied 65000 + (pid % 1024) times to the password.
 * - The ticket TicketGranting hands a user (Login, LoginEx, RequestTicket) is
 *   `RC4(userKey)(session key (16) || u32 target pid || Buffer32 internal ticket) ||
 *   HMAC-MD5(userKey, ciphertext)`: the client can read the session key; the internal ticket is
 *   opaque to it and is what it presents to the secure server.
 * - The internal ticket is this server's own format (the client never looks inside):
 *   `IV (12) || AES-256-GCM(serverKey)(u32 user pid, u64 valid-until ms, session key (16)) ||
 *   tag (16)`.
 * - The secure CONNECT payload (after the classic RC4 and compression byte) is
 *   `Buffer32 internal ticket || Buffer32 request`, the request being
 *   `RC4(sessionKey)(u32 pid, u32 cid, u32 response check) || HMAC-MD5(sessionKey, ciphertext)`.
 *   The CONNECT-ACK answers `u32 4, u32 response check + 1`.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';
import { ConfigError } from '../../../core/errors.js';
import { PrudpError, PrudpErrorCode } from './packet.js';
import { Rc4Key } from './rc4.js';

export const SESSION_KEY_BYTES = 16;
/** PID of the secure server ("Quazal Rendez-Vous") in RequestTicket and StationURLs. */
export const SECURE_SERVER_PID = 2;

/** MD5 rounds every user key takes at least. */
export const USER_KEY_BASE_ROUNDS = 65000;
/** The extra rounds are `pid % USER_KEY_SPREAD`: one password has only this many distinct keys. */
export const USER_KEY_SPREAD = 1024;

/**
 * Links `from` … `from + count - 1` of the MD5 chain over `seed` (link n is MD5 applied n times),
 * concatenated: `count` 16-byte values. `from` >= 1.
 */
export function md5Chain(seed: Uint8Array, from: number, count: number): Buffer {
  const out = Buffer.alloc(count * 16);
  let link: Buffer = Buffer.from(seed);
  const last = from + count - 1;
  for (let i = 1; i <= last; i++) {
    link = createHash('md5').update(link).digest();
    if (i >= from) link.copy(out, (i - from) * 16);
  }
  return out;
}

/** MD5^(65000 + pid % 1024)(password). About 0.1 s of CPU: servers go through UserKeyCache. */
export function deriveUserKey(pid: number, password: string): Buffer {
  return md5Chain(Buffer.from(password, 'utf8'), USER_KEY_BASE_ROUNDS + ((pid >>> 0) % USER_KEY_SPREAD), 1);
}

/**
 * Every key `password` can have (1024 x 16 bytes; the key of `pid` is entry `pid % 1024`), for
 * the cost of one derivation: the keys are consecutive links of one MD5 chain.
 */
export function userKeyTable(password: string): Buffer {
  return md5Chain(Buffer.from(password, 'utf8'), USER_KEY_BASE_ROUNDS, USER_KEY_SPREAD);
}

/** The key of `pid` in a userKeyTable (a view, not a copy). */
export function keyFromTable(table: Buffer, pid: number): Buffer {
  const i = ((pid >>> 0) % USER_KEY_SPREAD) * 16;
  return table.subarray(i, i + 16);
}

/** RC4(key)(plain) || HMAC-MD5(key, ciphertext). */
export function kerberosSeal(key: Uint8Array, plain: Uint8Array): Buffer {
  const ct = new Rc4Key(key).process(plain);
  return Buffer.concat([ct, createHmac('md5', key).update(ct).digest()]);
}

/** Checks the HMAC and decrypts; undefined when the HMAC does not match. */
export function kerberosOpen(key: Uint8Array, sealed: Uint8Array): Buffer | undefined {
  if (sealed.length < 16) return undefined;
  const ct = sealed.subarray(0, sealed.length - 16);
  const mac = createHmac('md5', key).update(ct).digest();
  if (!timingSafeEqual(mac, sealed.subarray(sealed.length - 16))) return undefined;
  return new Rc4Key(key).process(ct);
}

export interface InternalTicket {
  pid: number;
  validUntil: number;
  sessionKey: Buffer;
}

/** Issues and checks tickets with one server key (shared by the auth and secure roles). */
export class KerberosAuthority {
  private readonly serverKey: Buffer;
  readonly ticketLifetimeMs: number;

  constructor(serverKey: Uint8Array = randomBytes(32), ticketLifetimeMs = 3600_000) {
    if (serverKey.length !== 32) throw new ConfigError('Kerberos server key must be 32 bytes', 'serverKey');
    this.serverKey = Buffer.from(serverKey);
    this.ticketLifetimeMs = ticketLifetimeMs;
  }

  /** The internal ticket for `pid` with a session key. */
  internalTicket(pid: number, sessionKey: Buffer, now = Date.now()): Buffer {
    const plain = Buffer.alloc(28);
    plain.writeUInt32LE(pid >>> 0, 0);
    plain.writeBigUInt64LE(BigInt(now + this.ticketLifetimeMs), 4);
    sessionKey.copy(plain, 12);
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.serverKey, iv);
    const ct = Buffer.concat([c.update(plain), c.final()]);
    return Buffer.concat([iv, ct, c.getAuthTag()]);
  }

  /** Opens an internal ticket; undefined when forged, damaged or expired. */
  openInternal(ticket: Uint8Array, now = Date.now()): InternalTicket | undefined {
    if (ticket.length !== 12 + 28 + 16) return undefined;
    try {
      const d = createDecipheriv('aes-256-gcm', this.serverKey, ticket.subarray(0, 12));
      d.setAuthTag(ticket.subarray(40));
      const plain = Buffer.concat([d.update(ticket.subarray(12, 40)), d.final()]);
      const validUntil = Number(plain.readBigUInt64LE(4));
      if (validUntil < now) return undefined;
      return { pid: plain.readUInt32LE(0), validUntil, sessionKey: Buffer.from(plain.subarray(12, 28)) };
    } catch {
      return undefined;
    }
  }

  /** The ticket a user receives: readable with its key, carrying the internal ticket for `targetPid`. */
  userTicket(userPid: number, userKey: Buffer, targetPid: number): { sealed: Buffer; sessionKey: Buffer } {
    const sessionKey = randomBytes(SESSION_KEY_BYTES);
    const internal = this.internalTicket(userPid, sessionKey);
    const plain = Buffer.alloc(SESSION_KEY_BYTES + 4 + 4 + internal.length);
    sessionKey.copy(plain, 0);
    plain.writeUInt32LE(targetPid >>> 0, 16);
    plain.writeUInt32LE(internal.length, 20);
    internal.copy(plain, 24);
    return { sealed: kerberosSeal(userKey, plain), sessionKey };
  }
}

/** What a client reads out of its user ticket. */
export function openUserTicket(
  sealed: Uint8Array,
  userKey: Uint8Array,
): { sessionKey: Buffer; targetPid: number; internal: Buffer } | undefined {
  const plain = kerberosOpen(userKey, sealed);
  if (plain === undefined || plain.length < 24) return undefined;
  const n = plain.readUInt32LE(20);
  if (24 + n !== plain.length) return undefined;
  return {
    sessionKey: Buffer.from(plain.subarray(0, 16)),
    targetPid: plain.readUInt32LE(16),
    internal: Buffer.from(plain.subarray(24)),
  };
}

/** The secure CONNECT body a client sends (before the classic RC4 and compression byte). */
export function secureConnectBody(
  internal: Uint8Array,
  sessionKey: Uint8Array,
  pid: number,
  cid: number,
  check: number,
): Buffer {
  const req = Buffer.alloc(12);
  req.writeUInt32LE(pid >>> 0, 0);
  req.writeUInt32LE(cid >>> 0, 4);
  req.writeUInt32LE(check >>> 0, 8);
  const request = kerberosSeal(sessionKey, req);
  const out = Buffer.alloc(8 + internal.length + request.length);
  out.writeUInt32LE(internal.length, 0);
  out.set(internal, 4);
  out.writeUInt32LE(request.length, 4 + internal.length);
  request.copy(out, 8 + internal.length);
  return out;
}

/**
 * Validates a secure CONNECT body. Returns the user's pid and the CONNECT-ACK body
 * (`u32 4, u32 check + 1`), or throws an Error saying what is wrong.
 */
export function acceptSecureConnect(
  authority: KerberosAuthority,
  body: Buffer,
): { pid: number; sessionKey: Buffer; ackBody: Buffer } {
  if (body.length < 8) throw new PrudpError(PrudpErrorCode.BAD_PAYLOAD, 'Kerberos CONNECT payload too short');
  const tlen = body.readUInt32LE(0);
  if (tlen > body.length - 8)
    throw new PrudpError(PrudpErrorCode.BAD_PAYLOAD, 'Kerberos ticket length runs past the payload');
  const ticket = authority.openInternal(body.subarray(4, 4 + tlen));
  if (ticket === undefined)
    throw new PrudpError(PrudpErrorCode.AUTH, 'Kerberos ticket is forged, damaged or expired');
  const rlen = body.readUInt32LE(4 + tlen);
  if (8 + tlen + rlen !== body.length)
    throw new PrudpError(PrudpErrorCode.BAD_PAYLOAD, 'Kerberos request length does not match the payload');
  const req = kerberosOpen(ticket.sessionKey, body.subarray(8 + tlen));
  if (req === undefined || req.length !== 12)
    throw new PrudpError(PrudpErrorCode.AUTH, 'Kerberos request does not verify with the session key');
  const pid = req.readUInt32LE(0);
  if (pid !== ticket.pid)
    throw new PrudpError(PrudpErrorCode.AUTH, 'Kerberos request names another user than its ticket');
  const ackBody = Buffer.alloc(8);
  ackBody.writeUInt32LE(4, 0);
  ackBody.writeUInt32LE((req.readUInt32LE(8) + 1) >>> 0, 4);
  return { pid, sessionKey: ticket.sessionKey, ackBody };
}
