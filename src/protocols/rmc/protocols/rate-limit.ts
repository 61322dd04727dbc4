/**
 * Registration rate limits: token buckets per address (IPv4, or IPv6 /64) and for the whole
 * server, so one address cannot fill the account store, and many cannot fill it quickly.
 */

import { TokenBucket, TokenBuckets } from '../../../core/token-bucket.js';
import { DEFAULT_REGISTRATIONS_PER_HOUR, DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR } from '../options.js';

export interface RegistrationLimits {
  /** New accounts one address may create per hour, also the burst (default 256; 0 = no limit). */
  perIpPerHour?: number;
  /** New accounts the whole server creates per hour, also the burst (default 10 000; 0 = no limit). */
  perHour?: number;
  /** Addresses remembered at once; the least recently seen is forgotten first (default 100 000). */
  maxTrackedAddresses?: number;
}

// Option defaults (`rmc.registrationsPerIpPerHour`, `rmc.registrationsPerHour`): the declaration's (options.ts).
export { DEFAULT_REGISTRATIONS_PER_HOUR, DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR };

const HOUR_S = 3600;

/** Both limits on the one token bucket of src/core/token-bucket.ts: refilled evenly over the hour. */
export class RegistrationLimiter {
  readonly perIpPerHour: number;
  readonly perHour: number;
  private readonly perAddress: TokenBuckets;
  private readonly global: TokenBucket;

  constructor(limits: RegistrationLimits = {}) {
    this.perIpPerHour = limits.perIpPerHour ?? DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR;
    this.perHour = limits.perHour ?? DEFAULT_REGISTRATIONS_PER_HOUR;
    // The least recently seen address is forgotten first, in O(1).
    this.perAddress = new TokenBuckets(
      this.perIpPerHour / HOUR_S,
      this.perIpPerHour,
      limits.maxTrackedAddresses ?? 100_000,
    );
    this.global = new TokenBucket(this.perHour / HOUR_S, this.perHour, Date.now());
  }

  /**
   * Takes one registration for `address` (an address key). Returns undefined when allowed, or
   * which limit refused it: `address` or `server`. Nothing is taken from either when one refuses.
   */
  take(address: string, now = Date.now()): 'address' | 'server' | undefined {
    let b: TokenBucket | undefined;
    if (this.perIpPerHour > 0) {
      b = this.perAddress.bucket(address, now);
      if (b.peek(now) < 1) return 'address';
    }
    if (this.perHour > 0 && !this.global.take(now)) return 'server';
    b?.take(now);
    return undefined;
  }

  /** Addresses currently remembered (for tests and monitoring). */
  get trackedAddresses(): number {
    return this.perAddress.size;
  }
}
