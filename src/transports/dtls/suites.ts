import { type CipherCCMTypes, type CipherGCMTypes, createCipheriv, createDecipheriv } from 'node:crypto';
import { DTLS_1_2, RECORD_HEADER_LENGTH } from './constants.js';

/** What the record layer and the key schedule need to know about one PSK AEAD cipher suite. */
export interface CipherSuite {
  readonly id: number;
  readonly name: string;
  /** `node:crypto` cipher name. */
  readonly algorithm: 'aes-128-gcm' | 'aes-256-gcm' | 'aes-128-ccm' | 'aes-256-ccm' | 'chacha20-poly1305';
  readonly mode: 'gcm' | 'ccm' | 'chacha';
  readonly keyLength: number;
  /** Implicit IV from the key block: 4 bytes for GCM/CCM (RFC 5288, RFC 6655), 12 for ChaCha20 (RFC 7905). */
  readonly fixedIvLength: number;
  /** Nonce bytes carried in each record: 8 for GCM/CCM, none for ChaCha20. */
  readonly explicitNonceLength: number;
  readonly tagLength: number;
  /** Hash of the PRF and of the handshake transcript. */
  readonly hash: 'sha256' | 'sha384';
}

function suite(
  id: number,
  name: string,
  algorithm: CipherSuite['algorithm'],
  keyLength: number,
  tagLength: number,
  hash: CipherSuite['hash'],
): CipherSuite {
  const mode = algorithm.endsWith('gcm') ? 'gcm' : algorithm.endsWith('ccm') ? 'ccm' : 'chacha';
  const chacha = mode === 'chacha';
  return Object.freeze({
    id,
    name,
    algorithm,
    mode,
    keyLength,
    fixedIvLength: chacha ? 12 : 4,
    explicitNonceLength: chacha ? 0 : 8,
    tagLength,
    hash,
  });
}

/** Every suite this module implements: plain PSK key exchange with an AEAD cipher only. */
export const CIPHER_SUITES: ReadonlyMap<number, CipherSuite> = new Map(
  [
    suite(0x00a8, 'TLS_PSK_WITH_AES_128_GCM_SHA256', 'aes-128-gcm', 16, 16, 'sha256'),
    suite(0x00a9, 'TLS_PSK_WITH_AES_256_GCM_SHA384', 'aes-256-gcm', 32, 16, 'sha384'),
    suite(0xc0a4, 'TLS_PSK_WITH_AES_128_CCM', 'aes-128-ccm', 16, 16, 'sha256'),
    suite(0xc0a5, 'TLS_PSK_WITH_AES_256_CCM', 'aes-256-ccm', 32, 16, 'sha256'),
    suite(0xc0a8, 'TLS_PSK_WITH_AES_128_CCM_8', 'aes-128-ccm', 16, 8, 'sha256'),
    suite(0xc0a9, 'TLS_PSK_WITH_AES_256_CCM_8', 'aes-256-ccm', 32, 8, 'sha256'),
    suite(0xccab, 'TLS_PSK_WITH_CHACHA20_POLY1305_SHA256', 'chacha20-poly1305', 32, 16, 'sha256'),
  ].map((s) => [s.id, s]),
);

/**
 * The server's default preference: AES-128-GCM first (what Unity's mbedTLS-based client ends up
 * with against the real Relay, 37 bytes of record overhead), then AES-256-GCM, the CCM suites,
 * CCM_8, and ChaCha20-Poly1305 last.
 */
export const DEFAULT_CIPHER_SUITES: readonly number[] = [
  0x00a8, 0x00a9, 0xc0a4, 0xc0a5, 0xc0a8, 0xc0a9, 0xccab,
];

/** Bytes a record adds around its plaintext: header, explicit nonce and tag. */
export function recordOverhead(s: CipherSuite): number {
  return RECORD_HEADER_LENGTH + s.explicitNonceLength + s.tagLength;
}

/**
 * One direction of record protection (RFC 5246 §6.2.3.3 with the DTLS sequence number): the key,
 * the implicit IV, and scratch buffers for the nonce and the additional data, reused for every
 * record so the per-record work allocates only what `node:crypto` itself needs.
 */
export class RecordProtection {
  readonly suite: CipherSuite;
  readonly #key: Buffer;
  readonly #iv: Buffer;
  readonly #nonce = Buffer.alloc(12);
  readonly #aad = Buffer.alloc(13);

  constructor(s: CipherSuite, key: Buffer, iv: Buffer) {
    this.suite = s;
    this.#key = key;
    this.#iv = iv;
    if (s.mode !== 'chacha') iv.copy(this.#nonce, 0, 0, 4);
  }

  /** The key and implicit IV (handed to a record-layer offload; see offload.ts). */
  material(): { key: Buffer; iv: Buffer } {
    return { key: this.#key, iv: this.#iv };
  }

  /** Bytes a record adds around its plaintext. */
  get overhead(): number {
    return recordOverhead(this.suite);
  }

  #setNonceAndAad(type: number, version: number, epoch: number, seq: number, length: number): void {
    const aad = this.#aad;
    aad.writeUInt16BE(epoch, 0);
    aad.writeUIntBE(seq, 2, 6);
    aad[8] = type;
    aad.writeUInt16BE(version, 9);
    aad.writeUInt16BE(length, 11);
    if (this.suite.mode === 'chacha') {
      // RFC 7905 §2: the 64-bit record sequence number, left-padded, XORed into the 12-byte IV.
      const nonce = this.#nonce;
      for (let i = 0; i < 4; i++) nonce[i] = this.#iv[i]!;
      for (let i = 0; i < 8; i++) nonce[4 + i] = this.#iv[4 + i]! ^ aad[i]!;
    }
  }

  /**
   * Writes one whole record (header, explicit nonce = epoch‖seq, ciphertext, tag) into a new
   * buffer of exactly the record's size, ready to be sent as a datagram or part of one.
   */
  seal(type: number, epoch: number, seq: number, plaintext: Buffer): Buffer {
    const s = this.suite;
    const fragmentLength = s.explicitNonceLength + plaintext.length + s.tagLength;
    const out = Buffer.allocUnsafe(RECORD_HEADER_LENGTH + fragmentLength);
    out[0] = type;
    out.writeUInt16BE(DTLS_1_2, 1);
    out.writeUInt16BE(epoch, 3);
    out.writeUIntBE(seq, 5, 6);
    out.writeUInt16BE(fragmentLength, 11);
    this.#setNonceAndAad(type, DTLS_1_2, epoch, seq, plaintext.length);
    let at = RECORD_HEADER_LENGTH;
    if (s.explicitNonceLength === 8) {
      // RFC 5288 §3 allows any unique explicit nonce; epoch‖seq is unique by construction.
      out.copy(this.#nonce, 4, 3, 11);
      out.copy(out, at, 3, 11);
      at += 8;
    }
    if (s.mode === 'ccm') {
      const c = createCipheriv(s.algorithm as CipherCCMTypes, this.#key, this.#nonce, {
        authTagLength: s.tagLength,
      });
      c.setAAD(this.#aad, { plaintextLength: plaintext.length });
      at += c.update(plaintext).copy(out, at);
      c.final();
      c.getAuthTag().copy(out, at);
    } else {
      const c = createCipheriv(s.algorithm as CipherGCMTypes, this.#key, this.#nonce, {
        authTagLength: s.tagLength,
      });
      c.setAAD(this.#aad);
      at += c.update(plaintext).copy(out, at);
      c.final();
      c.getAuthTag().copy(out, at);
    }
    return out;
  }

  /**
   * Decrypts and authenticates one record's fragment. Returns the plaintext, or undefined when
   * the fragment is too short or fails authentication (RFC 6347 §4.1.2.7: such records are
   * dropped silently).
   */
  open(type: number, version: number, epoch: number, seq: number, fragment: Buffer): Buffer | undefined {
    const s = this.suite;
    const plaintextLength = fragment.length - s.explicitNonceLength - s.tagLength;
    if (plaintextLength < 0) return undefined;
    this.#setNonceAndAad(type, version, epoch, seq, plaintextLength);
    if (s.explicitNonceLength === 8) fragment.copy(this.#nonce, 4, 0, 8);
    const ciphertext = fragment.subarray(s.explicitNonceLength, s.explicitNonceLength + plaintextLength);
    const tag = fragment.subarray(s.explicitNonceLength + plaintextLength);
    try {
      if (s.mode === 'ccm') {
        const d = createDecipheriv(s.algorithm as CipherCCMTypes, this.#key, this.#nonce, {
          authTagLength: s.tagLength,
        });
        d.setAuthTag(tag);
        d.setAAD(this.#aad, { plaintextLength });
        const plaintext = d.update(ciphertext);
        d.final();
        return plaintext;
      }
      const d = createDecipheriv(s.algorithm as CipherGCMTypes, this.#key, this.#nonce, {
        authTagLength: s.tagLength,
      });
      d.setAuthTag(tag);
      d.setAAD(this.#aad);
      const plaintext = d.update(ciphertext);
      d.final();
      return plaintext;
    } catch {
      return undefined;
    }
  }
}
