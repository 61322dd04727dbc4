/**
 * The one error model of gamewire's binary layer.
 *
 * Decoders throw only `DecodeError`; encoders (and JSON-to-message conversion) throw only
 * `EncodeError`. Both carry a stable string `code` that scripts and tests can rely on, and a
 * field `path` (`args[2].value`) so a person can find the bad field.
 */

/**
 * The base of every error gamewire throws on purpose. `code` is stable (`ERR_…`) and is what
 * scripts, tests and the CLI's JSON error line rely on; the message is for people and may change.
 * It lives in the wire layer because the wire layer depends on nothing, so every other layer can
 * extend it. The codes are listed in docs/errors.md.
 */
export class GamewireError<Code extends string | number = string> extends Error {
  /**
   * Stable machine-readable code: `ERR_…` for everything gamewire itself reports. A protocol
   * error that mirrors the protocol's own numbering (an RMC result code) may keep that number.
   */
  readonly code: Code;

  constructor(code: Code, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  override get name(): string {
    return 'GamewireError';
  }
}

export function isGamewireError(e: unknown): e is GamewireError<string | number> {
  return e instanceof GamewireError;
}

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
  /** A codec declaration that cannot work (a reserved field name, a condition on a later field). */
  BAD_DECLARATION: 'ERR_BAD_DECLARATION',
  /** A fault inside gamewire itself (a bug), reported through the same typed path. */
  INTERNAL: 'ERR_INTERNAL',
} as const;

export type KnownErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

function joinPath(segment: string, rest: string): string {
  if (rest === '') return segment;
  if (segment === '') return rest;
  return rest.startsWith('[') ? `${segment}${rest}` : `${segment}.${rest}`;
}

abstract class WireError extends GamewireError<string> {
  /** Field path from the outermost message down, e.g. `args[2].value`; '' when not inside a field. */
  path: string;
  /** The message without the path, so the path can be prefixed while the error unwinds. */
  readonly detail: string;

  constructor(code: string, detail: string, path = '') {
    super(code, path === '' ? detail : `${path}: ${detail}`);
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

/** A codec declared in a way that cannot work; thrown when the declaration is made, never on input. */
export class DeclarationError extends GamewireError {
  constructor(message: string) {
    super(ErrorCode.BAD_DECLARATION, message);
  }

  override get name(): string {
    return 'DeclarationError';
  }
}
