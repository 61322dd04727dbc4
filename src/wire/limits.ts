/**
 * Decode limits. Every length, count and depth read from the wire is checked against these
 * before anything is allocated for it. Protocols set tighter defaults of their own.
 */
export interface DecodeLimits {
  /** Longest string, in bytes. */
  maxStringBytes: number;
  /** Longest byte array, in bytes. */
  maxBytesLength: number;
  /** Most elements in one array, list or map. */
  maxArrayLength: number;
  /** Deepest nesting of recursive items (calls in calls, variants in variants). */
  maxDepth: number;
}

export const DEFAULT_LIMITS: Readonly<DecodeLimits> = Object.freeze({
  maxStringBytes: 64 * 1024,
  maxBytesLength: 16 * 1024 * 1024,
  maxArrayLength: 65_536,
  maxDepth: 32,
});

export function resolveLimits(partial?: Partial<DecodeLimits>): DecodeLimits {
  if (partial === undefined) return DEFAULT_LIMITS as DecodeLimits;
  return { ...DEFAULT_LIMITS, ...partial };
}
