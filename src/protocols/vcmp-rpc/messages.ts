/**
 * VC-MP NPC LibRPC ServerData: the message declaration. The fixed parts (identifier, payloads)
 * are declared with the wire core; the tag-dispatched, recursive items are hand-written behind
 * the same Codec interface (read.ts, write.ts, json.ts), because their bounds rules differ
 * between the strict reader and the lenient one that mimics the real C++ plugin.
 */
import {
  Codec,
  type CodecInfo,
  enumOf,
  type Json,
  message,
  t,
  type WireReader,
  type WireWriter,
} from '../../wire/index.js';
import { callToJson, topFromJson, valueToJson } from './json.js';
import { type ReadMode, readTopItem } from './read.js';
import { Identifier, type TopItem } from './values.js';
import { writeTopItem } from './write.js';

export { type ReadMode, readTopItem, readValue } from './read.js';
export * from './values.js';
export { writeCall, writeTopItem, writeValue } from './write.js';

export const IdentifierCodec = enumOf(t.u32le, Identifier);

/** The top-level item as a Codec (hand-written: recursive, tag-dispatched, mode-dependent). */
class TopItemCodec extends Codec<TopItem> {
  readonly info: CodecInfo = {
    kind: 'custom',
    name: 'vcmp-rpc.item',
    description:
      "tag 'F'|'E' (u32 BE size, u16 BE name length, name, values) or 'G'|'D' (u32 BE size, nested call item, values); NPC→server also 'h' (u32 BE size, values). Values: 'o', 'i' i32 LE, 'f' f32 LE, 'b' 0|1, 's' u16 BE length + bytes, 'v' 3×f32 LE, 'q' 4×f32 LE, 'a' u32 BE byte length + values, nested call items, and NPC→server 'g' (u32 BE size, values)",
  };
  private readonly mode: ReadMode;

  constructor(mode: ReadMode) {
    super();
    this.mode = mode;
    this.minSize = 5;
  }

  read(r: WireReader): TopItem {
    return readTopItem(r, this.mode);
  }

  write(w: WireWriter, value: TopItem): void {
    writeTopItem(w, value);
  }

  toJson(value: TopItem): Json {
    return value.type === 'set' ? { type: 'set', values: value.values.map(valueToJson) } : callToJson(value);
  }

  fromJson(json: unknown, path: string): TopItem {
    return topFromJson(json, path);
  }
}

function serverDataCodec(mode: ReadMode) {
  return message('ServerData', { identifier: IdentifierCodec, item: new TopItemCodec(mode) });
}

/** Codecs for each reading mode (writing is the same for all). */
export const ServerDataCodecs = {
  strict: {
    any: serverDataCodec({ lenient: false, direction: 'any' }),
    server: serverDataCodec({ lenient: false, direction: 'server' }),
    client: serverDataCodec({ lenient: false, direction: 'client' }),
  },
  lenient: {
    any: serverDataCodec({ lenient: true, direction: 'any' }),
    server: serverDataCodec({ lenient: true, direction: 'server' }),
    client: serverDataCodec({ lenient: true, direction: 'client' }),
  },
} as const;

/** The default declaration, for introspection and for encoding. */
export const ServerDataCodec = ServerDataCodecs.strict.any;
