import { createHmac } from 'node:crypto';
import { MASTER_SECRET_LENGTH, VERIFY_DATA_LENGTH } from './constants.js';
import { type CipherSuite, RecordProtection } from './suites.js';

/** TLS 1.2 PRF (RFC 5246 §5): P_hash(secret, label ‖ seed) cut to `length` bytes. */
export function prf(hash: string, secret: Buffer, label: string, seed: Buffer, length: number): Buffer {
  const labelAndSeed = Buffer.concat([Buffer.from(label, 'latin1'), seed]);
  const out = Buffer.allocUnsafe(length);
  let a: Buffer = labelAndSeed;
  let written = 0;
  while (written < length) {
    a = createHmac(hash, secret).update(a).digest();
    const block = createHmac(hash, secret).update(a).update(labelAndSeed).digest();
    written += block.copy(out, written, 0, Math.min(block.length, length - written));
  }
  return out;
}

/** The plain-PSK premaster secret (RFC 4279 §2): uint16(N) ‖ N zero bytes ‖ uint16(N) ‖ psk. */
export function pskPremasterSecret(psk: Buffer): Buffer {
  const n = psk.length;
  const pms = Buffer.alloc(4 + 2 * n);
  pms.writeUInt16BE(n, 0);
  pms.writeUInt16BE(n, 2 + n);
  psk.copy(pms, 4 + n);
  return pms;
}

/**
 * The master secret: RFC 7627 §4 (extended, over the session hash through ClientKeyExchange)
 * when both sides agreed to it, else RFC 5246 §8.1 (over the two randoms).
 */
export function masterSecret(
  s: CipherSuite,
  premaster: Buffer,
  extended: boolean,
  sessionHash: Buffer,
  clientRandom: Buffer,
  serverRandom: Buffer,
): Buffer {
  return extended
    ? prf(s.hash, premaster, 'extended master secret', sessionHash, MASTER_SECRET_LENGTH)
    : prf(
        s.hash,
        premaster,
        'master secret',
        Buffer.concat([clientRandom, serverRandom]),
        MASTER_SECRET_LENGTH,
      );
}

export interface TrafficKeys {
  client: RecordProtection;
  server: RecordProtection;
}

/** RFC 5246 §6.3: key block → client/server write keys and IVs (AEAD suites have no MAC keys). */
export function trafficKeys(
  s: CipherSuite,
  master: Buffer,
  clientRandom: Buffer,
  serverRandom: Buffer,
): TrafficKeys {
  const length = 2 * (s.keyLength + s.fixedIvLength);
  const block = prf(s.hash, master, 'key expansion', Buffer.concat([serverRandom, clientRandom]), length);
  let at = 0;
  const take = (n: number): Buffer => {
    const part = Buffer.from(block.subarray(at, at + n));
    at += n;
    return part;
  };
  const clientKey = take(s.keyLength);
  const serverKey = take(s.keyLength);
  const clientIv = take(s.fixedIvLength);
  const serverIv = take(s.fixedIvLength);
  return {
    client: new RecordProtection(s, clientKey, clientIv),
    server: new RecordProtection(s, serverKey, serverIv),
  };
}

/** Finished.verify_data (RFC 5246 §7.4.9). */
export function verifyData(
  s: CipherSuite,
  master: Buffer,
  sender: 'client' | 'server',
  transcriptHash: Buffer,
): Buffer {
  return prf(s.hash, master, `${sender} finished`, transcriptHash, VERIFY_DATA_LENGTH);
}
