/**
 * The relay's and the API's limiters are token buckets keyed by source, bounded in size: the one
 * implementation in src/core/token-bucket.ts, re-exported here where unity-relay's users found it.
 */
export { DEFAULT_LIMITER_KEYS, TokenBuckets } from '../../core/token-bucket.js';
