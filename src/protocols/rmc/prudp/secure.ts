/**
 * The HyperScape "new secure" CONNECT (ECDH P-256 + AES-128-CBC DATA). Public sources give the
 * shape (an EC Diffie-Hellman exchange, the server's public key signed by a certification key,
 * a 16-byte DATA key from SHA-1 of the shared X coordinate); the byte-level choices below come
 * from the Far Cry 5 reconstruction of the same family and are INFERRED for HyperScape:
 *
 * - INFERRED: curve P-256; public keys as Windows CNG `ECK1` blobs (`"ECK1"`, u32 32, X, Y, big-endian).
 * - INFERRED: the client's CONNECT payload is the bare 72-byte blob (no RC4, no compression
 *   byte). A u16-length Buffer around it (an older wiki revision) is accepted too.
 * - INFERRED: the CONNECT-ACK payload is `u16 64, ECDSA-P256 signature r||s over SHA-256 of the
 *   server blob, u16 72, server blob, 32 random bytes` (their meaning is unknown).
 * - session key = SHA-1(X of d·Q)[0..16] (documented shape; SHA-1 and the 16 bytes are public).
 */
import {
  createECDH,
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
  verify,
} from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { publishFileSync } from '../../../core/publish-file.js';
import type { ClientCredentials } from './client.js';
import { PrudpError, PrudpErrorCode } from './packet.js';
import { SecurePayloadCodec } from './payload.js';
import type { ConnectHandler } from './server.js';

const ECK1 = Buffer.from('ECK1', 'latin1');
export const ECK1_BLOB_BYTES = 72;

/** A CNG ECK1 blob from an uncompressed point (04 || X || Y). */
export function eck1FromPoint(point: Buffer): Buffer {
  if (point.length !== 65 || point[0] !== 4)
    throw new PrudpError(PrudpErrorCode.BAD_PAYLOAD, 'expected an uncompressed P-256 point');
  const out = Buffer.alloc(ECK1_BLOB_BYTES);
  ECK1.copy(out, 0);
  out.writeUInt32LE(32, 4);
  point.copy(out, 8, 1);
  return out;
}

/** The uncompressed point (04 || X || Y) of an ECK1 blob; throws when it is not one. */
export function pointFromEck1(blob: Buffer): Buffer {
  if (blob.length !== ECK1_BLOB_BYTES || !blob.subarray(0, 4).equals(ECK1) || blob.readUInt32LE(4) !== 32)
    throw new PrudpError(PrudpErrorCode.BAD_PAYLOAD, 'not a P-256 ECK1 public key blob');
  return Buffer.concat([Buffer.from([4]), blob.subarray(8)]);
}

/** SHA-1 of the shared X coordinate, first 16 bytes. */
export function sessionKeyFromSecret(sharedX: Buffer): Buffer {
  return createHash('sha1').update(sharedX).digest().subarray(0, 16);
}

/**
 * Loads the server's ECDSA P-256 signing ("certification") key from `dir`, generating it on first
 * run. Processes starting together on one folder each generate one, but only the first to publish
 * its file wins (src/core/publish-file.ts) and all of them use the file's key, so clients trusting
 * its public half trust every one of them.
 */
export function loadOrCreateSigningKey(dir: string, file = 'prudp-signing-key.pem'): KeyObject {
  const p = path.join(dir, file);
  try {
    return createPrivateKey(readFileSync(p, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  mkdirSync(dir, { recursive: true });
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  return createPrivateKey(publishFileSync(p, pem, { mode: 0o600 }).data.toString('utf8'));
}

/** The signing key's public half as an ECK1-style blob (what a client would be configured to trust). */
export function publicBlobOf(key: KeyObject): Buffer {
  const jwk = createPublicKey(key).export({ format: 'jwk' }) as { x: string; y: string };
  return eck1FromPoint(
    Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x, 'base64url'), Buffer.from(jwk.y, 'base64url')]),
  );
}

/** Server side of the ECDH CONNECT. An empty CONNECT falls back to `plain` (classic payloads). */
export function ecdhConnectHandler(signingKey: KeyObject, plain: ConnectHandler): ConnectHandler {
  return (payload, info) => {
    if (payload.length === 0) return plain(payload, info);
    let blob = payload;
    if (payload.length === ECK1_BLOB_BYTES + 2 && payload.readUInt16LE(0) === ECK1_BLOB_BYTES)
      blob = payload.subarray(2);
    const clientPoint = pointFromEck1(blob);
    const ecdh = createECDH('prime256v1');
    ecdh.generateKeys();
    const shared = ecdh.computeSecret(clientPoint);
    const serverBlob = eck1FromPoint(ecdh.getPublicKey());
    const signature = sign('sha256', serverBlob, { key: signingKey, dsaEncoding: 'ieee-p1363' });
    const ack = Buffer.alloc(2 + 64 + 2 + ECK1_BLOB_BYTES + 32);
    ack.writeUInt16LE(64, 0);
    signature.copy(ack, 2);
    ack.writeUInt16LE(ECK1_BLOB_BYTES, 66);
    serverBlob.copy(ack, 68);
    randomBytes(32).copy(ack, 68 + ECK1_BLOB_BYTES);
    return { payload: new SecurePayloadCodec(sessionKeyFromSecret(shared)), ackPayload: ack };
  };
}

/** Client side of the ECDH CONNECT; with `trust` the server's signature must verify against it. */
export function ecdhCredentials(trust?: KeyObject): ClientCredentials {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  return {
    connectPayload: () => eck1FromPoint(ecdh.getPublicKey()),
    accept(ack) {
      if (
        ack.length < 2 + 64 + 2 + ECK1_BLOB_BYTES ||
        ack.readUInt16LE(0) !== 64 ||
        ack.readUInt16LE(66) !== ECK1_BLOB_BYTES
      )
        throw new PrudpError(PrudpErrorCode.AUTH, 'CONNECT-ACK is not a signed ECDH key');
      const signature = ack.subarray(2, 66);
      const serverBlob = ack.subarray(68, 68 + ECK1_BLOB_BYTES);
      if (
        trust !== undefined &&
        !verify('sha256', serverBlob, { key: trust, dsaEncoding: 'ieee-p1363' }, signature)
      )
        throw new PrudpError(PrudpErrorCode.AUTH, 'the server key signature does not verify');
      const shared = ecdh.computeSecret(pointFromEck1(Buffer.from(serverBlob)));
      return new SecurePayloadCodec(sessionKeyFromSecret(shared));
    },
  };
}
