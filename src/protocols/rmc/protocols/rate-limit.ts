/**
 * Registration rate limits: token buckets per address (IPv4, or IPv6 /64) and for the whole
 * server, so one address cannot fill the account store, and many cannot fill it quickly.
 */

export interface RegistrationLimits {
  /** New accounts one address may create per hour, also the burst (default 256; 0 = no limit). */
  perIpPerHour?: number;
  /** New accounts the whole server creates per hour, also the burst (default 10 000; 0 = no limit). */
  perHour?: number;
  /** Addresses remembered at once; the least recently seen is forgotten first (default 100 000). */
  maxTrackedAddresses?: number;
}

/** A venue or campus NAT of new players registers at once (issue 24): 20 refused the 21st. */
export const DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR = 256;
export const DEFAULT_REGISTRATIONS_PER_HOUR = 10_000;

const HOUR_MS = 3_600_000;

interface Bucket {
  tokens: number;
  at: number;
}

function refill(b: Bucket, capacity: number, now: number): void {
  if (now > b.at) {
    b.tokens = Math.min(capacity, b.tokens + ((now - b.at) * capacity) / HOUR_MS);
    b.at = now;
  }
}

export class RegistrationLimiter {
  readonly perIpPerHour: number;
  readonly perHour: number;
  private readonly maxTracked: number;
  private readonly perAddress = new Map<string, Bucket>();
  private readonly global: Bucket;

  constructor(limits: RegistrationLimits = {}) {
    this.perIpPerHour = limits.perIpPerHour ?? DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR;
    this.perHour = limits.perHour ?? DEFAULT_REGISTRATIONS_PER_HOUR;
    this.maxTracked = Math.max(1, limits.maxTrackedAddresses ?? 100_000);
    this.global = { tokens: this.perHour, at: Date.now() };
  }

  /**
   * Takes one registration for `address` (an address key). Returns undefined when allowed, or
   * which limit refused it: `address` or `server`.
   */
  take(address: string, now = Date.now()): 'address' | 'server' | undefined {
    let b: Bucket | undefined;
    if (this.perIpPerHour > 0) {
      b = this.perAddress.get(address);
      if (b === undefined) {
        // O(1) eviction of the least recently seen address.
        if (this.perAddress.size >= this.maxTracked) {
          const oldest = this.perAddress.keys().next().value;
          if (oldest !== undefined) this.perAddress.delete(oldest);
        }
        b = { tokens: this.perIpPerHour, at: now };
      } else {
        this.perAddress.delete(address);
        refill(b, this.perIpPerHour, now);
      }
      this.perAddress.set(address, b);
      if (b.tokens < 1) return 'address';
    }
    if (this.perHour > 0) {
      refill(this.global, this.perHour, now);
      if (this.global.tokens < 1) return 'server';
      this.global.tokens--;
    }
    if (b !== undefined) b.tokens--;
    return undefined;
  }

  /** Addresses currently remembered (for tests and monitoring). */
  get trackedAddresses(): number {
    return this.perAddress.size;
  }
}
