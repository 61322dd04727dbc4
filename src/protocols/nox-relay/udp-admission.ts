/**
 * UDP admission: who gets a session, what an unproven source may be sent, and how a source
 * proves its address.
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
 * - Clients that do not know the cookie (the reference v1 client) prove their address with
 *   instance aliases: their Sessions reply names each public instance by a random id of their
 *   own, which they then send back in Enter and every instance message. A wrong id is a blind
 *   guess; an address gets few of those (`AliasGuessBudget`). See docs/security.md.
 */
import { createHmac, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import { TokenBucket } from '../../core/token-bucket.js';
import { S2C } from './constants.js';
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

/** Every server-to-client message from Enter (0x06) to Leave (0x11) starts with the instance id. */
const FIRST_INSTANCE_TYPE = S2C.Enter;
const LAST_INSTANCE_TYPE = S2C.Leave;

/**
 * One UDP client's instance aliases: each listed instance under a random id of this client's
 * own, never the id of a real instance (so a real id and an alias are never confused).
 */
export class InstanceAliases {
  /** Alias → real instance id; -1 where the value is no alias. */
  readonly realOf = new Int16Array(256).fill(-1);
  /** Real instance id → its alias; -1 for an instance that has none. */
  readonly aliasOf = new Int16Array(256).fill(-1);
  /** The id this client uses for each real instance: its alias once it used it, else the real id. */
  private readonly wireId = new Uint8Array(256);
  private translating = false;
  /** The client's first use of a non-real id has been judged (one judgement per session). */
  judged = false;

  /** Aliases for `listed` (real ids), drawn from the values no real instance in `real` uses. */
  constructor(listed: readonly number[], real: ReadonlySet<number>) {
    for (let i = 0; i < 256; i++) this.wireId[i] = i;
    const free: number[] = [];
    for (let v = 0; v < 256; v++) if (!real.has(v)) free.push(v);
    for (const id of listed) {
      if (free.length === 0) break;
      const at = randomInt(free.length);
      const alias = free[at]!;
      free[at] = free[free.length - 1]!;
      free.pop();
      this.aliasOf[id] = alias;
      this.realOf[alias] = id;
    }
  }

  /** The client named real instance `id` by its alias: what it is sent about `id` uses the alias. */
  useAlias(id: number): void {
    const alias = this.aliasOf[id]!;
    if (alias < 0 || this.wireId[id] === alias) return;
    this.wireId[id] = alias;
    this.translating = true;
  }

  /**
   * `packet` (one whole server packet) as this client must see it: an instance message about an
   * instance it names by alias carries the alias. Other packets go unchanged, without a copy.
   */
  outgoing(packet: Buffer): Buffer {
    if (!this.translating || packet.length < 6) return packet;
    const type = packet[4]!;
    if (type < FIRST_INSTANCE_TYPE || type > LAST_INSTANCE_TYPE) return packet;
    const id = packet[5]!;
    const wire = this.wireId[id]!;
    if (wire === id) return packet;
    // The same bytes may be on their way to other members: this client gets its own copy.
    const copy = Buffer.allocUnsafe(packet.length);
    packet.copy(copy);
    copy[5] = wire;
    return copy;
  }
}

/**
 * Wrong alias guesses per source address: a token bucket each (`perIp` per `windowMs`), kept for
 * the addresses that guessed wrong, least recently used first out when the table is full. Once an
 * address has spent its guesses, no alias from it is checked (right or wrong) until they refill,
 * so a blind spoofer gets at most `perIp` tries per window per address it claims.
 */
export class AliasGuessBudget {
  private readonly buckets = new Map<string, TokenBucket>();
  private readonly perIp: number;
  private readonly windowMs: number;
  private readonly maxEntries: number;

  constructor(options: { aliasGuessesPerIp: number; aliasGuessWindowMs: number }, maxEntries = 65_536) {
    this.perIp = options.aliasGuessesPerIp;
    this.windowMs = options.aliasGuessWindowMs;
    this.maxEntries = maxEntries;
  }

  /** Addresses currently remembered. */
  get size(): number {
    return this.buckets.size;
  }

  /** Whether address `key` may still have an alias checked. */
  open(key: string, now: number): boolean {
    const b = this.buckets.get(key);
    return b === undefined || b.peek(now) >= 1;
  }

  /** A wrong guess from address `key`. */
  spend(key: string, now: number): void {
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxEntries) {
        for (const oldest of this.buckets.keys()) {
          this.buckets.delete(oldest);
          break;
        }
      }
      b = new TokenBucket((this.perIp * 1000) / this.windowMs, this.perIp, now);
    } else {
      this.buckets.delete(key);
    }
    this.buckets.set(key, b);
    b.take(now);
  }
}
