/**
 * gamewire's library root: decode and encode any protocol by name, the error classes and the
 * wire core's entry points. Importing it loads codecs only (no server, client or CLI code, and
 * none of their dependencies). Each protocol's full API is a subpath: `gamewire/rmc`,
 * `gamewire/js5`, `gamewire/unity-relay`, `gamewire/vcmp-rpc`, `gamewire/nox-relay`; the wire
 * core is `gamewire/wire`. See docs/library.md.
 */
import type { CodecOptions, ProtocolCodec } from './core/protocol.js';
import { allCodecs, findCodec } from './protocols/codecs.js';
import type { Json } from './wire/codec.js';
import { GamewireError } from './wire/errors.js';

export { CommandError, ConfigError, UsageError } from './core/errors.js';
export type { CodecOptions, Direction, ProtocolCodec, ProtocolModule } from './core/protocol.js';
export { allCodecs, findCodec } from './protocols/codecs.js';
export type { Json } from './wire/codec.js';
export {
  DeclarationError,
  DecodeError,
  EncodeError,
  ErrorCode,
  GamewireError,
  isGamewireError,
} from './wire/errors.js';

function codecFor(protocol: string, forEncode: boolean): ProtocolCodec {
  const codec = findCodec(protocol);
  if (codec === undefined) {
    throw new GamewireError(
      'ERR_UNKNOWN_PROTOCOL',
      `unknown protocol "${protocol}" (known: ${allCodecs.map((c) => c.name).join(', ')})`,
    );
  }
  if (forEncode && !codec.canEncode)
    throw new GamewireError('ERR_DECODE_ONLY', `${protocol} can be decoded, not encoded`);
  return codec;
}

/**
 * Decodes every message in `bytes` into the same JSON `gamewire decode` prints: one object, or
 * an array for several. Throws `DecodeError` for bad bytes (`ERR_INCOMPLETE` when more bytes
 * could complete them).
 */
export function decode(protocol: string, bytes: Uint8Array, options: CodecOptions = {}): Json {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return codecFor(protocol, false).decode(buf, options);
}

/** Encodes the JSON `decode` returns (an object or an array) back into bytes. Throws `EncodeError`. */
export function encode(protocol: string, json: unknown, options: CodecOptions = {}): Buffer {
  return codecFor(protocol, true).encode(json, options);
}
