/**
 * The `rmc` entry of `gamewire decode/encode`. Input is a stream of u32-framed RMC packets;
 * one packet gives one object, several give an array.
 *
 * `--variant hyperscape` (default) and `nex-verbose`: when the method is one gamewire declares
 * (the built-in protocols) and its arguments or results decode exactly, `args` / `results` is
 * an object of named fields; otherwise it is the raw bytes as hex. Both forms encode back to
 * the same bytes. `--variant classic`: args and results are always hex (method ids carry no
 * names).
 */
import type { CodecOptions, ProtocolCodec } from '../../core/protocol.js';
import {
  asDecodeError,
  bytes,
  type Codec,
  DecodeError,
  decode,
  EncodeError,
  ErrorCode,
  encode,
  type Json,
  WireReader,
  WireWriter,
} from '../../wire/index.js';
import { loadPacks } from './ddl/pack.js';
import { packetCodec, RMC_VARIANTS, type RmcVariant } from './messages.js';
import { BUILTIN_PROTOCOLS } from './protocols/index.js';
import { RMC_PROTOCOLS_FLAG } from './prudp/flags.js';
import { type MethodDef, type ProtocolDef, shortMethodName } from './signature.js';

/** Finds a declared method by protocol name and wire method name (`Proto::Method_V1`). */
export function findBuiltinMethod(
  protocol: string,
  method: string,
  protocols: readonly ProtocolDef<any>[] = BUILTIN_PROTOCOLS,
): MethodDef | undefined {
  for (const p of protocols) {
    if (p.name !== protocol) continue;
    const short = shortMethodName(p.name, method);
    return short === undefined ? undefined : p.byName.get(short);
  }
  return undefined;
}

/** Finds a declared method by its full name alone (`LoginProtocol::Register_V1`). */
export function findBuiltinByFullName(
  fullName: string,
  protocols: readonly ProtocolDef<any>[] = BUILTIN_PROTOCOLS,
): MethodDef | undefined {
  const i = fullName.indexOf('::');
  return i < 0 ? undefined : findBuiltinMethod(fullName.slice(0, i), fullName, protocols);
}

/** Finds a declared method by classic ids (protocols that declare an id, such as a pack's). */
export function findMethodById(
  protocolId: unknown,
  methodId: unknown,
  protocols: readonly ProtocolDef<any>[],
): MethodDef | undefined {
  if (typeof protocolId !== 'number' || typeof methodId !== 'number') return undefined;
  for (const p of protocols) if (p.id === protocolId) return p.byId.get(methodId);
  return undefined;
}

/**
 * The protocols `decode`/`encode rmc` know: those of the packs named by `--protocols` (files,
 * comma-separated) first, then the built-in ones.
 */
export function codecProtocols(options: CodecOptions): readonly ProtocolDef<any>[] {
  const files = options.extra?.protocols;
  if (files === undefined || files === '') return BUILTIN_PROTOCOLS;
  return [...loadPacks(files), ...BUILTIN_PROTOCOLS];
}

/**
 * Typed JSON when the declaration reads `raw` exactly and writes it back to the same bytes
 * (a non-canonical form, such as an empty String written `00 00`, stays hex); hex otherwise.
 */
export function typedOrHex(codec: Codec<unknown> | undefined, raw: Buffer): Json {
  if (codec !== undefined) {
    try {
      const value = decode(codec, raw);
      if (encode(codec, value).equals(raw)) return codec.toJson(value);
    } catch (e) {
      if (!(e instanceof DecodeError) && !(e instanceof EncodeError)) throw e;
    }
  }
  return raw.toString('hex');
}

const hexBytes = bytes('rest');

function bytesFromJson(codec: Codec<unknown> | undefined, j: unknown, path: string): Buffer {
  if (typeof j === 'string') return hexBytes.fromJson(j, path);
  if (codec === undefined)
    throw new EncodeError(ErrorCode.BAD_INPUT, 'method is not declared: give the bytes as hex', path);
  const value = codec.fromJson(j, path);
  const w = new WireWriter();
  try {
    codec.write(w, value);
  } catch (e) {
    if (e instanceof EncodeError) throw e.withPath(path);
    throw e;
  }
  return w.toBuffer();
}

function variantOf(options: CodecOptions): RmcVariant {
  return (options.variant as RmcVariant | undefined) ?? 'hyperscape';
}

/** Decodes every packet in `bytes`. Throws DecodeError only. */
export function decodeStream(
  bytesIn: Buffer,
  variant: RmcVariant,
  protocols: readonly ProtocolDef<any>[] = BUILTIN_PROTOCOLS,
): Json[] {
  const codec = packetCodec(variant);
  const r = new WireReader(bytesIn);
  const out: Json[] = [];
  if (bytesIn.length === 0) throw new DecodeError(ErrorCode.INCOMPLETE, 'no RMC packet in the input', 0);
  while (r.offset < r.end) {
    let msg: any;
    try {
      msg = codec.read(r);
    } catch (e) {
      throw asDecodeError(e, r.offset);
    }
    const json = codec.toJson(msg) as Record<string, Json>;
    if (variant === 'classic') {
      // Typed only for protocols that declare ids (a pack's); hex otherwise.
      if (msg.type === 'request') {
        json.args = typedOrHex(findMethodById(msg.protocolId, msg.methodId, protocols)?.args, msg.args);
      } else if (msg.type === 'response') {
        json.results = typedOrHex(
          findMethodById(msg.protocolId, msg.methodId, protocols)?.results,
          msg.results,
        );
      }
    } else if (msg.type === 'request') {
      json.args = typedOrHex(findBuiltinMethod(msg.protocol, msg.method, protocols)?.args, msg.args);
    } else if (msg.type === 'response' && typeof msg.method === 'string' && msg.method.endsWith('*')) {
      json.results = typedOrHex(
        findBuiltinMethod(msg.protocol, msg.method.slice(0, -1), protocols)?.results,
        msg.results,
      );
    }
    out.push(json);
  }
  return out;
}

/** Encodes one packet's JSON (typed or hex args/results). Throws EncodeError. */
export function encodeJson(
  json: unknown,
  variant: RmcVariant,
  w: WireWriter,
  path = '',
  protocols: readonly ProtocolDef<any>[] = BUILTIN_PROTOCOLS,
): void {
  const codec = packetCodec(variant);
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new EncodeError(ErrorCode.BAD_INPUT, 'expected an object', path);
  }
  const o = { ...(json as Record<string, unknown>) };
  const sub = (k: string) => (path === '' ? k : `${path}.${k}`);
  if (variant === 'classic') {
    const m = findMethodById(o.protocolId, o.methodId, protocols);
    if (o.type === 'request' && o.args !== undefined) {
      o.args = bytesFromJson(m?.args, o.args, sub('args')).toString('hex');
    } else if (o.type === 'response' && o.results !== undefined) {
      o.results = bytesFromJson(m?.results, o.results, sub('results')).toString('hex');
    }
  } else if (typeof o.protocol === 'string' && typeof o.method === 'string') {
    if (o.type === 'request' && o.args !== undefined) {
      o.args = bytesFromJson(
        findBuiltinMethod(o.protocol, o.method, protocols)?.args,
        o.args,
        sub('args'),
      ).toString('hex');
    } else if (o.type === 'response' && o.results !== undefined) {
      const m = o.method.endsWith('*')
        ? findBuiltinMethod(o.protocol, o.method.slice(0, -1), protocols)
        : undefined;
      o.results = bytesFromJson(m?.results, o.results, sub('results')).toString('hex');
    }
  }
  const value = codec.fromJson(o, path);
  codec.write(w, value as never);
}

export const rmcCodec: ProtocolCodec = {
  name: 'rmc',
  summary: 'Rendez-Vous RMC packets (u32-framed): request, response, error',
  variants: RMC_VARIANTS,
  canEncode: true,
  flags: [RMC_PROTOCOLS_FLAG],
  decode(input: Buffer, options: CodecOptions): Json {
    const all = decodeStream(input, variantOf(options), codecProtocols(options));
    return all.length === 1 ? all[0]! : all;
  },
  encode(json: unknown, options: CodecOptions): Buffer {
    const variant = variantOf(options);
    const w = new WireWriter();
    const protocols = codecProtocols(options);
    if (Array.isArray(json)) {
      for (let i = 0; i < json.length; i++) encodeJson(json[i], variant, w, `[${i}]`, protocols);
    } else encodeJson(json, variant, w, '', protocols);
    return w.toBuffer();
  },
};
