import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { COOKIE_LENGTH } from './constants.js';

/**
 * Stateless HelloVerifyRequest cookies (RFC 6347 §4.2.1): HMAC-SHA256 over the client's address,
 * port and every ClientHello field except the cookie itself, so a cookie is good only for the same
 * source and the same hello. The secret rotates every `rotationMs`; a cookie made with the
 * previous secret is still accepted, so a client that got its HelloVerifyRequest just before a
 * rotation still gets in. Rotation is lazy (checked on use), so no timer keeps the process alive.
 */
export class CookieJar {
  #current = randomBytes(32);
  #previous = randomBytes(32);
  #rotatedAt: number;
  readonly #rotationMs: number;

  constructor(rotationMs: number, now = Date.now()) {
    this.#rotationMs = rotationMs;
    this.#rotatedAt = now;
  }

  #rotate(now: number): void {
    const age = now - this.#rotatedAt;
    if (age < this.#rotationMs) return;
    // After two periods or more, the old current secret is too old to accept as well.
    this.#previous = age >= 2 * this.#rotationMs ? randomBytes(32) : this.#current;
    this.#current = randomBytes(32);
    this.#rotatedAt = now;
  }

  #mac(secret: Buffer, address: string, port: number, beforeCookie: Buffer, afterCookie: Buffer): Buffer {
    const h = createHmac('sha256', secret);
    h.update(address);
    const portBytes = Buffer.allocUnsafe(2);
    portBytes.writeUInt16BE(port, 0);
    h.update(portBytes);
    h.update(beforeCookie);
    h.update(afterCookie);
    return h.digest();
  }

  make(address: string, port: number, beforeCookie: Buffer, afterCookie: Buffer, now = Date.now()): Buffer {
    this.#rotate(now);
    return this.#mac(this.#current, address, port, beforeCookie, afterCookie);
  }

  verify(
    cookie: Buffer,
    address: string,
    port: number,
    beforeCookie: Buffer,
    afterCookie: Buffer,
    now = Date.now(),
  ): boolean {
    if (cookie.length !== COOKIE_LENGTH) return false;
    this.#rotate(now);
    for (const secret of [this.#current, this.#previous]) {
      if (timingSafeEqual(cookie, this.#mac(secret, address, port, beforeCookie, afterCookie))) return true;
    }
    return false;
  }
}
