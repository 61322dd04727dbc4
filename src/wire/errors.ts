/**
 * The one error model of gamewire's binary layer.
 *
 * Decoders throw only `DecodeError`; encoders (and JSON-to-message conversion) throw only
 * `EncodeError`. Both carry a stable string `code` that scripts and tests can rely on, and a
 * field `path` (`args[2].value`) so a person can find the bad field.
 */

/** Codes shared by every protocol. Protocols may add their own, always starting with `ERR_`. */
export const ErrorCode = {
  /** The input ended before the message was complete: more bytes could make it valid. */
  INCOMPLETE: 'ERR_INCOMPLETE',
  /** A nested size or length runs past the bounds of the item that contains it. */
  OVERRUN: 'ERR_OVERRUN',
  /** Bytes are left after a message that must fill its container exactly. */
  TRAILING_BYTES: 'ERR_TRAILING_BYTES',
  /** A length, count or size is over a configured limit (checked before anything is allocated). */
  TOO_LARGE: 'ERR_TOO_LARGE',
  /** Nesting is deeper than the configured limit. */
  TOO_DEEP: 'ERR_TOO_DEEP',
  /** A field has a value the format does not allow (a bool other than 0/1, a bad enum value). */
  BAD_VALUE: 'ERR_BAD_VALUE',
  /** A fixed signature, identifier or version does not match. */
  BAD_MAGIC: 'ERR_BAD_MAGIC',
  /** A type code, tag or opcode that the format does not define. */
  UNKNOWN_TYPE: 'ERR_UNKNOWN_TYPE',
  /** A string that is not valid in its declared encoding, or lacks its terminator. */
  BAD_STRING: 'ERR_BAD_STRING',
  /** A length field that contradicts the bytes around it. */
  BAD_LENGTH: 'ERR_BAD_LENGTH',
  /** Input to an encoder (typed value or JSON) that cannot be encoded. */
  BAD_INPUT: 'ERR_BAD_INPUT',
} as const;

export type KnownErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

function joinPath(segment: string, rest: string): string {
  if (rest === '') return segment;
  if (segment === '') return rest;
  return rest.startsWith('[') ? `${segment}${rest}` : `${segment}.${rest}`;
}

abstract class WireError extends Error {
  /** Stable machine-readable code, `ERR_…`. */
  readonly code: string;
  /** Field path from the outermost message down, e.g. `args[2].value`; '' when not inside a field. */
  path: string;
  /** The message without the path, so the path can be prefixed while the error unwinds. */
  readonly detail: string;

  constructor(code: string, detail: string, path = '') {
    super(path === '' ? detail : `${path}: ${detail}`);
    this.code = code;
    this.detail = detail;
    this.path = path;
  }

  /** Prefixes a path segment (called by containers while the error travels outwards). */
  withPath(segment: string): this {
    this.path = joinPath(segment, this.path);
    this.message = this.path === '' ? this.detail : `${this.path}: ${this.detail}`;
    return this;
  }
}

/** Thrown by every decoder for every kind of bad or short input, and by nothing else. */
export class DecodeError extends WireError {
  /** Byte offset in the input where decoding failed. */
  offset: number;

  constructor(code: string, detail: string, offset: number, path = '') {
    super(code, detail, path);
    this.offset = offset;
  }

  override get name(): string {
    return 'DecodeError';
  }

  /** Shifts the offset, for decoders that run on a part of a larger input (a frame in a stream). */
  atBase(base: number): this {
    this.offset += base;
    return this;
  }
}

/** Thrown when a value (typed or JSON) cannot be encoded. */
export class EncodeError extends WireError {
  override get name(): string {
    return 'EncodeError';
  }
}

export function isDecodeError(e: unknown): e is DecodeError {
  return e instanceof DecodeError;
}

/**
 * Turns anything a decoder body threw into a DecodeError. A bug that raised a TypeError or
 * RangeError still reaches callers as our one typed error (code ERR_INTERNAL), never as a crash.
 */
export function asDecodeError(e: unknown, offset: number): DecodeError {
  if (e instanceof DecodeError) return e;
  const detail = e instanceof Error ? e.message : String(e);
  return new DecodeError('ERR_INTERNAL', `internal decoder fault: ${detail}`, offset);
}
