/**
 * UDP admission: who gets a session, and what an unproven source may be sent.
 *
 * - A session is created only by a protocol-1 Handshake. Until the source sends a second valid
 *   packet it is half-open: half-open sessions have a server-wide cap and a much smaller
 *   per-address cap, and a new one evicts the oldest (of its address first, else of all), so a
 *   flood of Handshakes from one address, spoofed or not, cannot keep new players out.
 * - The Handshake reply carries an address cookie: a MAC of the source address and port under a
 *   secret that rotates every `addressCookieLifetimeMs`. A client that sends it back in a later
 *   Handshake has proven it receives at that address. Checking it needs no state (as DTLS's
 *   HelloVerifyRequest cookie), so a Handshake that carries a valid cookie is admitted directly,
 *   already proven, whatever the half-open table holds.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { ADDRESS_COOKIE_BYTES } from './messages.js';
import type { RelayClient } from './session.js';

export class UdpAdmission {
  /** Half-open sessions, oldest first (Map and Set keep insertion order: O(1) eviction). */
  private readonly halfOpen = new Set<RelayClient>();
  private readonly halfOpenByIp = new Map<string, Set<RelayClient>>();
  private readonly secret = randomBytes(32);
  private readonly lifetimeMs: number;

  constructor(options: { addressCookieLifetimeMs: number }) {
    this.lifetimeMs = options.addressCookieLifetimeMs;
  }

  /** Half-open sessions, server-wide. */
  get size(): number {
    return this.halfOpen.size;
  }

  /** Half-open sessions from one address (its `addressKey`: an IPv4 address or an IPv6 /64). */
  countFor(key: string): number {
    return this.halfOpenByIp.get(key)?.size ?? 0;
  }

  add(client: RelayClient): void {
    client.halfOpen = true;
    this.halfOpen.add(client);
    let set = this.halfOpenByIp.get(client.addressKey);
    if (set === undefined) {
      set = new Set();
      this.halfOpenByIp.set(client.addressKey, set);
    }
    set.add(client);
  }

  /** The client is no longer half-open (promoted or gone). */
  remove(client: RelayClient): void {
    if (!client.halfOpen) return;
    client.halfOpen = false;
    this.halfOpen.delete(client);
    const set = this.halfOpenByIp.get(client.addressKey);
    if (set === undefined) return;
    set.delete(client);
    if (set.size === 0) this.halfOpenByIp.delete(client.addressKey);
  }

  /** The oldest half-open session of address `key`, or of everyone when `key` is undefined. */
  oldest(key?: string): RelayClient | undefined {
    const set = key === undefined ? this.halfOpen : this.halfOpenByIp.get(key);
    if (set === undefined) return undefined;
    for (const c of set) return c;
    return undefined;
  }

  private mac(epoch: number, ip: string, port: number): Buffer {
    return createHmac('sha256', this.secret)
      .update(`${epoch}|${ip}|${port}`)
      .digest()
      .subarray(0, ADDRESS_COOKIE_BYTES);
  }

  /** The cookie for a source address, valid for this period and the next. */
  cookie(ip: string, port: number, now = Date.now()): Buffer {
    return this.mac(Math.floor(now / this.lifetimeMs), ip, port);
  }

  verify(ip: string, port: number, cookie: Uint8Array, now = Date.now()): boolean {
    if (cookie.length !== ADDRESS_COOKIE_BYTES) return false;
    const epoch = Math.floor(now / this.lifetimeMs);
    return (
      timingSafeEqual(this.mac(epoch, ip, port), cookie) ||
      timingSafeEqual(this.mac(epoch - 1, ip, port), cookie)
    );
  }
}

/**
 * `msg` as one Handshake packet followed only by zero bytes (the padding that makes a first
 * datagram at least as large as the reply): the packet's end, or -1.
 */
export function handshakeEnd(msg: Buffer, maxPacketSize: number): number {
  if (msg.length < 5 || msg[4] !== 0x01) return -1;
  const len = msg.readUInt16BE(0);
  if (len < 5 || len > maxPacketSize || len > msg.length) return -1;
  for (let i = len; i < msg.length; i++) if (msg[i] !== 0) return -1;
  return len;
}
