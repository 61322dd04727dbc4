/**
 * Declared codecs. A message is declared once, as a tree of `Codec` objects; the same tree
 * drives decode, encode, the TypeScript type (`Infer<typeof Msg>`), JSON conversion for the
 * CLI, and introspection (`codec.info`) for the inspector and dissector generators.
 *
 * Structs compile their field list into straight-line JavaScript once, at declaration time, so a
 * declared message decodes about as fast as a hand-written one: monomorphic calls, stable object
 * shapes, no per-field loop.
 */

export * from './codec/composites.js';
export { badInput } from './codec/internal.js';
export * from './codec/primitives.js';
export * from './codec/sequences.js';
export * from './codec/struct.js';

import type { Codec } from './codec/primitives.js';
import { asDecodeError } from './errors.js';
import { DEFAULT_LIMITS, type DecodeLimits, resolveLimits } from './limits.js';
import { WireReader } from './reader.js';
import { WireWriter } from './writer.js';

const EMPTY_INPUT = Buffer.alloc(0);

// ---- whole-message helpers ------------------------------------------------------------------

export interface DecodeOptions {
  limits?: Partial<DecodeLimits>;
  /** Accept bytes after the message instead of failing with ERR_TRAILING_BYTES. */
  allowTrailing?: boolean;
}

// One reader serves every top-level decode (decoding is synchronous); a decode that starts while
// another is running (a custom codec decoding a nested container) gets its own.
const sharedReader = new WireReader();
let sharedBusy = false;

/** A complete limits object is used as it is; a partial one is filled from the defaults. */
function limitsFor(partial: Partial<DecodeLimits> | undefined): DecodeLimits {
  if (partial === undefined) return DEFAULT_LIMITS as DecodeLimits;
  if (
    partial.maxStringBytes !== undefined &&
    partial.maxBytesLength !== undefined &&
    partial.maxArrayLength !== undefined &&
    partial.maxDepth !== undefined
  ) {
    return partial as DecodeLimits;
  }
  return resolveLimits(partial);
}

/**
 * Decodes exactly one message from `bytes`. Throws only DecodeError. Allocates nothing of its
 * own per call when `limits` is absent or complete (every key set).
 */
export function decode<T>(codec: Codec<T>, bytes: Uint8Array, options: DecodeOptions = {}): T {
  const nested = sharedBusy;
  const r = nested ? new WireReader() : sharedReader;
  r.reset(bytes);
  r.limits = limitsFor(options.limits);
  sharedBusy = true;
  try {
    const v = codec.read(r);
    if (options.allowTrailing !== true) r.expectEnd();
    return v;
  } catch (e) {
    throw asDecodeError(e, r.offset);
  } finally {
    if (!nested) {
      sharedBusy = false;
      r.reset(EMPTY_INPUT);
    }
  }
}

/** Encodes into a new buffer. */
export function encode<T>(codec: Codec<T>, value: T): Buffer {
  const w = new WireWriter();
  codec.write(w, value);
  return w.toBuffer();
}

/** Encodes into a reused writer (reset first) and returns a view of the bytes: no allocation. */
export function encodeInto<T>(codec: Codec<T>, value: T, w: WireWriter): Buffer {
  w.reset();
  codec.write(w, value);
  return w.view();
}
