/**
 * Payload encodings of DATA and CONNECT packets.
 *
 * - classic (Ubisoft V0, stream 3): `compression byte || body`, then RC4 with the key "CD&ML",
 *   fresh for every packet. The compression byte is 0 (body stored) or the ratio
 *   ceil(len(body) / len(zlib(body))) (a zlib stream follows); the body is compressed only when
 *   that is smaller, as the official peers do. Receivers take any non-zero byte as "zlib".
 * - secure (HyperScape, inferred from the Far Cry 5 reconstruction): `IV (16) ||
 *   AES-128-CBC-PKCS7(sessionKey, IV, compression byte || zlib(body))`.
 *
 * Empty payloads (acks, an empty CONNECT) are sent as they are: no compression byte, no cipher.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { deflateSync, inflateSync } from 'node:zlib';
import { ConfigError } from '../../../core/errors.js';
import { DecodeError } from '../../../wire/index.js';
import { CLASSIC_RC4_KEY } from './constants.js';
import { PrudpErrorCode } from './packet.js';
import { Rc4Key } from './rc4.js';

export interface PayloadCodec {
  /** Wire payload for a plaintext (one RMC message or fragment). */
  encode(plain: Uint8Array): Buffer;
  /** Plaintext of a wire payload, at most `maxBytes` long. Throws DecodeError only. */
  decode(wire: Uint8Array, maxBytes: number): Buffer;
  /** What the plaintext's compression byte was on the last `decode` (for the CLI). */
  lastCompression: number;
}

/** `compression byte || body`: zlib only when it is smaller (or always, with `always`). */
export function compressBody(body: Uint8Array, always = false): Buffer {
  if (body.length === 0) return Buffer.from([0]);
  const z = deflateSync(body);
  if (always || z.length < body.length) {
    const out = Buffer.allocUnsafe(z.length + 1);
    out[0] = Math.min(255, Math.max(1, Math.ceil(body.length / z.length)));
    z.copy(out, 1);
    return out;
  }
  const out = Buffer.allocUnsafe(body.length + 1);
  out[0] = 0;
  out.set(body, 1);
  return out;
}

/** Undoes `compressBody`; throws DecodeError on a bad zlib stream or one over `maxBytes`. */
export function decompressBody(plain: Buffer, maxBytes: number): Buffer {
  if (plain.length === 0) return plain;
  if (plain[0] === 0) {
    if (plain.length - 1 > maxBytes) throw tooLarge(plain.length - 1, maxBytes);
    return plain.subarray(1);
  }
  try {
    return inflateSync(plain.subarray(1), { maxOutputLength: Math.max(1, maxBytes) });
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(maxBytes + 1, maxBytes);
    throw new DecodeError(
      PrudpErrorCode.BAD_PAYLOAD,
      `payload does not inflate: ${(err as Error).message}`,
      1,
      'payload',
    );
  }
}

function tooLarge(n: number, max: number): DecodeError {
  return new DecodeError('ERR_TOO_LARGE', `payload inflates to over ${max} bytes (${n})`, 0, 'payload');
}

const classicKey = new Rc4Key(CLASSIC_RC4_KEY);

/** Classic V0: compression byte + RC4("CD&ML", or another key), reset per packet. */
export class ClassicPayloadCodec implements PayloadCodec {
  lastCompression = 0;
  private readonly key: Rc4Key;

  constructor(key: Rc4Key = classicKey) {
    this.key = key;
  }

  encode(plain: Uint8Array): Buffer {
    if (plain.length === 0) return Buffer.alloc(0);
    const out = compressBody(plain);
    this.key.apply(out);
    return out;
  }

  decode(wire: Uint8Array, maxBytes: number): Buffer {
    if (wire.length === 0) {
      this.lastCompression = 0;
      return Buffer.alloc(0);
    }
    const plain = Buffer.from(wire);
    this.key.apply(plain);
    this.lastCompression = plain[0]!;
    return decompressBody(plain, maxBytes);
  }
}

/** The classic RC4 transform alone (CONNECT payloads on the auth and secure servers). */
export function classicRc4(data: Uint8Array): Buffer {
  return classicKey.process(data);
}

/** HyperScape secure DATA: IV + AES-128-CBC over compression byte + zlib (inferred, see docs). */
export class SecurePayloadCodec implements PayloadCodec {
  lastCompression = 0;
  private readonly key: Buffer;

  constructor(sessionKey: Uint8Array) {
    if (sessionKey.length !== 16) throw new ConfigError('AES-128 session key must be 16 bytes', 'sessionKey');
    this.key = Buffer.from(sessionKey);
  }

  encode(plain: Uint8Array): Buffer {
    if (plain.length === 0) return Buffer.alloc(0);
    // Always compressed: the only observed peer always sends a ratio byte and zlib (inferred).
    const body = compressBody(plain, true);
    const iv = randomBytes(16);
    const c = createCipheriv('aes-128-cbc', this.key, iv);
    return Buffer.concat([iv, c.update(body), c.final()]);
  }

  decode(wire: Uint8Array, maxBytes: number): Buffer {
    if (wire.length === 0) {
      this.lastCompression = 0;
      return Buffer.alloc(0);
    }
    if (wire.length < 32 || (wire.length - 16) % 16 !== 0) {
      throw new DecodeError(
        PrudpErrorCode.BAD_PAYLOAD,
        `secure payload of ${wire.length} bytes is not IV + whole AES blocks`,
        0,
        'payload',
      );
    }
    let plain: Buffer;
    try {
      const d = createDecipheriv('aes-128-cbc', this.key, wire.subarray(0, 16));
      plain = Buffer.concat([d.update(wire.subarray(16)), d.final()]);
    } catch {
      throw new DecodeError(PrudpErrorCode.BAD_PAYLOAD, 'secure payload does not decrypt', 16, 'payload');
    }
    this.lastCompression = plain[0] ?? 0;
    return decompressBody(plain, maxBytes);
  }
}
