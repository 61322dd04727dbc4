/**
 * Whole-packet encode/decode for LibRPC ServerData, and the CLI adapter.
 */
import type { CodecOptions, ProtocolCodec } from '../../core/protocol.js';
import {
  asDecodeError,
  DecodeError,
  type DecodeLimits,
  decode,
  EncodeError,
  ErrorCode,
  GamewireError,
  WireReader,
  WireWriter,
} from '../../wire/index.js';
import { type LiveHooks, runTopLive } from './lenient.js';
import {
  Identifier,
  IdentifierCodec,
  MAX_DEPTH,
  MAX_PACKET_BYTES,
  type ServerData,
  ServerDataCodec,
  ServerDataCodecs,
  type TopItem,
} from './messages.js';
import { writeTopItem } from './write.js';

export interface DecodeServerDataOptions {
  /** Accept what the C++ reader accepts (docs/vcmp-rpc.md, "Strict and lenient reading") instead of rejecting it. Default false. */
  lenient?: boolean;
  /** Who sent it: `server` (server→NPC, no g/h) or `client` (NPC→server). Default: either. */
  from?: 'server' | 'client';
  /** Largest packet accepted (default 4095). */
  maxPacketBytes?: number;
  /** Deepest nesting of calls and arrays (default 32). */
  maxDepth?: number;
}

/** Decodes one ServerData packet. Throws only DecodeError. */
export function decodeServerData(bytes: Uint8Array, options: DecodeServerDataOptions = {}): ServerData {
  const max = options.maxPacketBytes ?? MAX_PACKET_BYTES;
  if (bytes.length > max) {
    throw new DecodeError(
      ErrorCode.TOO_LARGE,
      `packet of ${bytes.length} bytes exceeds the limit of ${max}`,
      0,
    );
  }
  const codec = ServerDataCodecs[options.lenient === true ? 'lenient' : 'strict'][options.from ?? 'any'];
  const limits =
    options.maxDepth === undefined && options.maxPacketBytes === undefined
      ? DEFAULT_LIMITS
      : limitsOf(options.maxDepth ?? MAX_DEPTH, max);
  return decode(codec, bytes, { limits });
}

function limitsOf(maxDepth: number, maxPacketBytes: number): DecodeLimits {
  // Strings carry a u16 length; nothing in a packet can hold more elements than it has bytes.
  return { maxDepth, maxStringBytes: 0xffff, maxBytesLength: maxPacketBytes, maxArrayLength: maxPacketBytes };
}

const DEFAULT_LIMITS = limitsOf(MAX_DEPTH, MAX_PACKET_BYTES);

/**
 * Runs a packet while reading it, the way the real plugin does (the executor's streaming mode):
 * each call runs as soon as it is read, through `hooks`, and a failure is thrown after the calls
 * before it have run. The identifier is read but not checked (the caller does). Throws what a hook
 * throws, or DecodeError for malformed bytes; returns what the top-level call returned.
 */
export function runServerDataLive(
  bytes: Uint8Array,
  hooks: LiveHooks,
  options: Omit<DecodeServerDataOptions, 'lenient'> = {},
): unknown {
  const max = options.maxPacketBytes ?? MAX_PACKET_BYTES;
  if (bytes.length > max) {
    throw new DecodeError(
      ErrorCode.TOO_LARGE,
      `packet of ${bytes.length} bytes exceeds the limit of ${max}`,
      0,
    );
  }
  const r = new WireReader(bytes, limitsOf(options.maxDepth ?? MAX_DEPTH, max));
  try {
    r.u32le();
    const at = r.offset;
    const tag = r.u8();
    return runTopLive(r, { lenient: true, direction: options.from ?? 'any' }, tag, at, hooks);
  } catch (e) {
    // A hook's own failure (an RpcExecutionError) passes through; anything else is a decode fault.
    if (e instanceof GamewireError && !(e instanceof DecodeError)) throw e;
    throw asDecodeError(e, r.offset);
  }
}

export interface EncodeServerDataOptions {
  /** Write the v1.6 beta..beta4 identifier 0x40000000 instead of 0x40000001. */
  legacy?: boolean;
  /** Largest packet produced (default 4095); a larger one is ERR_TOO_LARGE. */
  maxPacketBytes?: number;
  /** Encode into this reused writer and return a view of its bytes (no allocation). */
  writer?: WireWriter;
  /** Deepest nesting written (default 32, the decoder's default): deeper is ERR_TOO_DEEP. */
  maxDepth?: number;
}

/** Encodes a ServerData packet around one call (or `set`) item. */
export function encodeServerData(item: TopItem, options: EncodeServerDataOptions = {}): Buffer {
  const packet: ServerData = {
    type: 'ServerData',
    identifier: options.legacy === true ? Identifier.legacy : Identifier.current,
    item,
  };
  return encodePacket(packet, options);
}

/** Encodes a ServerData object as given (its own identifier). */
export function encodePacket(
  packet: ServerData,
  options: Omit<EncodeServerDataOptions, 'legacy'> = {},
): Buffer {
  const w = options.writer ?? new WireWriter({ initialCapacity: 128 });
  w.reset();
  IdentifierCodec.write(w, packet.identifier);
  writeTopItem(w, packet.item, options.maxDepth ?? MAX_DEPTH);
  const max = options.maxPacketBytes ?? MAX_PACKET_BYTES;
  if (w.offset > max) {
    throw new EncodeError(ErrorCode.TOO_LARGE, `ServerData of ${w.offset} bytes exceeds the limit of ${max}`);
  }
  return options.writer !== undefined ? w.view() : w.toBuffer();
}

/** `gamewire decode|encode vcmp-rpc`: one ServerData per input. `--variant lenient` reads like the C++. */
export const vcmpRpcCodec: ProtocolCodec = {
  name: 'vcmp-rpc',
  summary: 'VC-MP NPC LibRPC ServerData (one packet per input)',
  variants: ['strict', 'lenient'],
  canEncode: true,
  decode(bytes: Buffer, options: CodecOptions) {
    const packet = decodeServerData(bytes, {
      lenient: options.variant === 'lenient',
      ...(options.from ? { from: options.from } : {}),
    });
    return ServerDataCodec.toJson(packet);
  },
  encode(json: unknown, options: CodecOptions) {
    if (Array.isArray(json)) {
      throw new EncodeError(
        ErrorCode.BAD_INPUT,
        'vcmp-rpc carries one ServerData per packet; give one object',
      );
    }
    const packet = ServerDataCodec.fromJson(json, '') as ServerData;
    if (options.from === 'server' && packet.item.type === 'set') {
      throw new EncodeError(ErrorCode.BAD_INPUT, "a 'set' item only travels NPC→server", 'item');
    }
    return encodePacket(packet);
  },
};
