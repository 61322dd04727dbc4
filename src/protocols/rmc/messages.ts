/**
 * RMC packet declarations for both variants.
 *
 * HyperScape ("verbose", string-named; the default), spec §1.2:
 *
 *   u32 length (excludes itself) | String protocol | bool isRequest
 *   request:  u32 callId | String method | List<ClassVersion> | args…
 *   response: bool success
 *     success: u32 callId | String method + "*" | results…
 *     failure: String namespace | u16 code | u32 callId
 *
 * nex-go's verbose variant is the same except for the failure body (u32 code with the MSB set,
 * u32 callId; spec §2.2, §7.2). It is available as `nex-verbose`.
 *
 * Classic packed (NEX and most Quazal titles), spec §2.1:
 *
 *   u32 size | u8 protocolId (| 0x80 for a request) | (if id == 0x7F: u16 extended id)
 *   request:  u32 callId | u32 methodId | args…
 *   response: bool success
 *     ok:   u32 callId | u32 (methodId | 0x8000) | results…
 *     fail: u32 errorCode (MSB set) | u32 callId
 *
 * Each envelope is declared once with `select` (branch on isRequest, then on success); only the
 * classic protocol byte (two fields in one byte) and the response method id's 0x8000 bit are
 * small hand-written codecs. Args and results stay raw bytes at this level: method signatures
 * (signature.ts) give them their types.
 */
import {
  bytes,
  type Codec,
  type CodecInfo,
  custom,
  DecodeError,
  EncodeError,
  ErrorCode,
  type Fields,
  type Infer,
  type Json,
  message,
  ObjectCodec,
  select,
  struct,
  t,
  type WireReader,
  type WireWriter,
} from '../../wire/index.js';
import { ClassVersion, list, qString } from './types.js';

export type RmcVariant = 'hyperscape' | 'classic' | 'nex-verbose';
export const RMC_VARIANTS: readonly RmcVariant[] = ['hyperscape', 'classic', 'nex-verbose'];

/** Largest frame the server and client accept by default (length prefix included). */
export const DEFAULT_MAX_FRAME_BYTES = 1024 * 1024;

const hexRest = bytes('rest');

/** The rest of the packet (args or results), as a view of the input. */
export const restBytes = custom<Buffer>({
  name: 'rmc.rest',
  description: 'the rest of the packet: arguments or results, as laid out by the method signature',
  read: (r) => r.rest(),
  write: (w, v) => w.bytes(v),
  toJson: (v) => v.toString('hex'),
  fromJson: (j, path) => hexRest.fromJson(j, path),
});

// ---- the envelope, declared once -------------------------------------------------------------
//
// Each variant's envelope is one declaration (`select` on `isRequest`, then on `success`). The
// packet codecs below, the client, the server's failure frames and the inspector all use it; the
// dissector reads the same bodies. The u32 length prefix around it is the framing.

const verboseRequestFields = {
  callId: t.u32le,
  method: qString,
  classVersions: list(ClassVersion),
  args: restBytes,
};
const verboseSuccessFields = { callId: t.u32le, method: qString, results: restBytes };
/** HyperScape failure: the namespace written out as a String, then a u16 code. */
const hyperscapeFailureFields = { namespace: qString, code: t.u16le, callId: t.u32le };
/** nex-go verbose failure: a u32 result code (MSB set), then the call id. */
const nexFailureFields = { errorCode: t.u32le, callId: t.u32le };

export const VerboseRequestBody = struct(verboseRequestFields);
export const VerboseSuccessBody = struct(verboseSuccessFields);
export const HyperscapeFailureBody = struct(hyperscapeFailureFields);
export const NexFailureBody = struct(nexFailureFields);

/** What every verbose packet starts with (after the length): the protocol name and the request flag. */
export const VerboseHead = struct({ protocol: qString, isRequest: t.bool });
const SuccessFlag = struct({ success: t.bool });

function verboseEnvelope<F extends Fields>(failure: F) {
  return select(VerboseHead, 'isRequest', {
    true: message('request', verboseRequestFields),
    false: select(SuccessFlag, 'success', {
      true: message('response', verboseSuccessFields),
      false: message('error', failure),
    }),
  });
}

/** The HyperScape envelope (string-named protocol and method, String namespace + u16 on failure). */
export const HyperscapeEnvelope = verboseEnvelope(hyperscapeFailureFields);
/** The verbose envelope with nex-go's failure body (u32 result code). */
export const NexVerboseEnvelope = verboseEnvelope(nexFailureFields);

/**
 * The classic protocol byte: the id in the low 7 bits, 0x80 on requests; id 0x7F means a u16
 * extended id follows. One byte holds two fields, so it is a small hand-written head.
 */
class ClassicHeadCodec extends ObjectCodec<{ protocolId: number; isRequest: boolean }> {
  readonly info: CodecInfo = {
    kind: 'custom',
    name: 'rmc.classicHead',
    description: 'u8 protocol id | 0x80 on requests; id 0x7F: a u16 LE extended id follows',
  };
  readonly name = undefined;
  readonly fieldNames: ReadonlySet<string> = new Set(['protocolId', 'isRequest']);
  readonly outerFields: ReadonlySet<string> = new Set();

  constructor() {
    super();
    this.minSize = 1;
  }

  read(r: WireReader): { protocolId: number; isRequest: boolean } {
    return this.readInto(r, {});
  }

  readInto(r: WireReader, o: Record<string, unknown>): { protocolId: number; isRequest: boolean } {
    try {
      const b = r.u8();
      const id = b & 0x7f;
      o.protocolId = id === 0x7f ? r.u16le() : id;
      o.isRequest = (b & 0x80) !== 0;
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath('protocolId') : e;
    }
    return o as { protocolId: number; isRequest: boolean };
  }

  write(w: WireWriter, v: { protocolId: number; isRequest: boolean }): void {
    writeProtocolId(w, v.protocolId, v.isRequest);
  }

  toJsonInto(v: { protocolId: number; isRequest: boolean }, out: Record<string, Json>): void {
    out.protocolId = v.protocolId;
    out.isRequest = v.isRequest;
  }

  fromJsonInto(
    j: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void {
    known.add('protocolId');
    known.add('isRequest');
    out.protocolId = t.u16le.fromJson(j.protocolId, sub(path, 'protocolId'));
    out.isRequest = t.bool.fromJson(j.isRequest, sub(path, 'isRequest'));
  }
}

/** A response's method id: written with the 0x8000 response bit, which decoding checks and removes. */
const responseMethodId = custom<number>({
  name: 'rmc.responseMethodId',
  description: 'u32 LE method id | 0x8000 (the response bit)',
  fixedSize: 4,
  read: (r) => {
    const at = r.offset;
    const m = r.u32le();
    if ((m & 0x8000) === 0) {
      throw new DecodeError(
        ErrorCode.BAD_VALUE,
        `response method id 0x${m.toString(16)} lacks the 0x8000 bit`,
        at,
      );
    }
    return (m & ~0x8000) >>> 0;
  },
  write: (w, v) => {
    if (!Number.isInteger(v) || v < 0 || v > 0xffff_ffff)
      throw new EncodeError(ErrorCode.BAD_INPUT, `method id ${v} is not a u32`);
    if (v > 0x7fff && (v & 0x8000) !== 0)
      throw new EncodeError(ErrorCode.BAD_INPUT, 'methodId must not carry the 0x8000 response bit');
    w.u32le((v | 0x8000) >>> 0);
  },
  toJson: (v) => v,
  fromJson: (j, path) => {
    const v = t.u32le.fromJson(j, path);
    if (v > 0x7fff) throw new EncodeError(ErrorCode.BAD_INPUT, 'methodId must be under 0x8000', path);
    return v;
  },
});

export const ClassicHead = new ClassicHeadCodec();

/** The classic packed envelope (protocol and method by number). */
export const ClassicEnvelope = select(ClassicHead, 'isRequest', {
  true: message('request', { callId: t.u32le, methodId: t.u32le, args: restBytes }),
  false: select(SuccessFlag, 'success', {
    true: message('response', { callId: t.u32le, methodId: responseMethodId, results: restBytes }),
    false: message('error', { errorCode: t.u32le, callId: t.u32le }),
  }),
});

export const ClassicRequestBody = struct({ callId: t.u32le, methodId: t.u32le, args: restBytes });
export const ClassicFailureBody = struct({ errorCode: t.u32le, callId: t.u32le });

// ---- messages: the envelope's values without its two flags (the type says them) -------------

export interface VerboseRequestMessage {
  type: 'request';
  protocol: string;
  callId: number;
  method: string;
  classVersions: ClassVersion[];
  args: Buffer;
}
export interface VerboseResponseMessage {
  type: 'response';
  protocol: string;
  callId: number;
  method: string;
  results: Buffer;
}
export interface HyperscapeErrorMessage {
  type: 'error';
  protocol: string;
  namespace: string;
  code: number;
  callId: number;
}
export interface NexErrorMessage {
  type: 'error';
  protocol: string;
  errorCode: number;
  callId: number;
}
export type HyperscapeMessage = VerboseRequestMessage | VerboseResponseMessage | HyperscapeErrorMessage;
export type NexVerboseMessage = VerboseRequestMessage | VerboseResponseMessage | NexErrorMessage;

export interface ClassicRequestMessage {
  type: 'request';
  protocolId: number;
  callId: number;
  methodId: number;
  args: Buffer;
}
export interface ClassicResponseMessage {
  type: 'response';
  protocolId: number;
  callId: number;
  methodId: number;
  results: Buffer;
}
export interface ClassicErrorMessage {
  type: 'error';
  protocolId: number;
  errorCode: number;
  callId: number;
}
export type ClassicMessage = ClassicRequestMessage | ClassicResponseMessage | ClassicErrorMessage;

/** Reads the part of a verbose packet after the u32 length: protocol and isRequest. */
export function readVerboseHead(r: WireReader): { protocol: string; isRequest: boolean } {
  return VerboseHead.read(r);
}

/** Reads the u32 length and narrows the reader to the packet; returns the previous bound. */
function enterFrame(r: WireReader): number {
  const at = r.offset;
  const n = r.u32le();
  try {
    return r.limit(n, 'RMC packet');
  } catch (e) {
    if (e instanceof DecodeError) e.offset = at;
    throw e;
  }
}

function leaveFrame(r: WireReader, previous: number): void {
  r.expectEnd('RMC packet');
  r.restore(previous);
}

/** Writes the u32 length placeholder; returns where to patch it. */
export function beginFrame(w: WireWriter): number {
  return w.reserve(4);
}

export function endFrame(w: WireWriter, at: number): void {
  w.patchU32le(at, w.offset - at - 4);
}

/** The envelope's flags for a message type; an unknown type is an EncodeError at `path`. */
function flagsOf(type: unknown, path: string): { isRequest: boolean; success: boolean | undefined } {
  if (type === 'request') return { isRequest: true, success: undefined };
  if (type === 'response') return { isRequest: false, success: true };
  if (type === 'error') return { isRequest: false, success: false };
  throw new EncodeError(
    ErrorCode.BAD_INPUT,
    path === 'type' ? `unknown RMC message type ${String(type)}` : 'expected type request, response or error',
    path,
  );
}

/** An envelope value → a message (type first, the two flags dropped). */
function toMessage<M>(v: Record<string, unknown>): M {
  const { type, isRequest: _r, success: _s, ...rest } = v;
  return { type, ...rest } as M;
}

/** A message → the envelope value the declaration writes. */
function toEnvelope(m: { type: unknown }): Record<string, unknown> {
  const f = flagsOf(m.type, 'type');
  const v: Record<string, unknown> = { ...m, isRequest: f.isRequest };
  if (f.success !== undefined) v.success = f.success;
  return v;
}

/** A packet codec: the u32 length, then `envelope`; values are messages (`type` says the flags). */
function envelopePacket<M extends { type: string }>(
  name: string,
  description: string,
  envelope: ObjectCodec<any>,
  minSize: number,
) {
  return custom<M>({
    name,
    description,
    minSize,
    read: (r) => {
      const previous = enterFrame(r);
      const v = envelope.read(r) as Record<string, unknown>;
      leaveFrame(r, previous);
      return toMessage<M>(v);
    },
    write: (w, m) => {
      const at = beginFrame(w);
      envelope.write(w, toEnvelope(m));
      endFrame(w, at);
    },
    toJson: (m) => toMessage<Json>(envelope.toJson(toEnvelope(m)) as Record<string, Json>),
    fromJson: (j, path) => {
      const o = objectJson(j, path);
      const f = flagsOf(o.type, sub(path, 'type'));
      const withFlags: Record<string, unknown> = { ...o, isRequest: f.isRequest };
      if (f.success !== undefined) withFlags.success = f.success;
      return toMessage<M>(envelope.fromJson(withFlags, path) as Record<string, unknown>);
    },
  });
}

/** A HyperScape RMC packet (the default variant). */
export const hyperscapePacket = envelopePacket<HyperscapeMessage>(
  'rmc.hyperscape',
  'u32 LE length, String protocol, bool isRequest; request: u32 callId, String method, List<ClassVersion>, args; ' +
    'response: bool success, then (u32 callId, String method*, results) or (String namespace, u16 code, u32 callId)',
  HyperscapeEnvelope,
  4 + 2 + 1,
);

/** A verbose RMC packet with nex-go's failure body (u32 code, u32 callId). */
export const nexVerbosePacket = envelopePacket<NexVerboseMessage>(
  'rmc.nex-verbose',
  'u32 LE length, String protocol, bool isRequest; request: u32 callId, String method, List<ClassVersion>, args; ' +
    'response: bool success, then (u32 callId, String method*, results) or (u32 errorCode, u32 callId)',
  NexVerboseEnvelope,
  4 + 2 + 1,
);

// ---- classic packed -------------------------------------------------------------------------

/** Reads the classic protocol byte (and the extended u16 id after 0x7F). */
export function readProtocolId(r: WireReader): { protocolId: number; isRequest: boolean } {
  return ClassicHead.read(r);
}

/** Writes the classic protocol byte (0x80 on requests), extended form from id 0x7F. */
export function writeProtocolId(w: WireWriter, id: number, isRequest: boolean): void {
  if (!Number.isInteger(id) || id < 0 || id > 0xffff) {
    throw new EncodeError(ErrorCode.BAD_INPUT, `protocol id ${id} is out of range 0..65535`, 'protocolId');
  }
  const flag = isRequest ? 0x80 : 0;
  if (id < 0x7f) w.u8(id | flag);
  else {
    w.u8(0x7f | flag);
    w.u16le(id);
  }
}

/** A classic packed RMC packet (`--variant classic`). */
export const classicPacket = envelopePacket<ClassicMessage>(
  'rmc.classic',
  'u32 LE size, u8 protocol id | 0x80 on requests (0x7F: u16 extended id); request: u32 callId, u32 methodId, args; ' +
    'response: bool success, then (u32 callId, u32 methodId | 0x8000, results) or (u32 errorCode, u32 callId)',
  ClassicEnvelope,
  5,
);

export type ClassicRequestBodyValue = Infer<typeof ClassicRequestBody>;

function objectJson(j: unknown, path: string): Record<string, unknown> {
  if (typeof j !== 'object' || j === null || Array.isArray(j)) {
    throw new EncodeError(ErrorCode.BAD_INPUT, 'expected an object', path);
  }
  return j as Record<string, unknown>;
}

function sub(path: string, key: string): string {
  return path === '' ? key : `${path}.${key}`;
}

/** The envelope codec for a variant. */
export function packetCodec(
  variant: RmcVariant,
): Codec<HyperscapeMessage | NexVerboseMessage | ClassicMessage> {
  if (variant === 'classic') return classicPacket as Codec<any>;
  if (variant === 'nex-verbose') return nexVerbosePacket as Codec<any>;
  return hyperscapePacket as Codec<any>;
}

/**
 * The envelope's branches as rows, read from the declaration (docs/rmc.md's envelope table is
 * checked against these): the path of flag values that leads to the branch, and the fields it
 * reads in order, after the u32 length.
 */
export function envelopeRows(envelope: Codec<unknown>): { branch: string; type: string; fields: string[] }[] {
  const rows: { branch: string; type: string; fields: string[] }[] = [];
  const fieldsOf = (c: Codec<unknown>): string[] => {
    const info = c.info;
    if (info.kind === 'struct') return info.fields.map((f) => f.name);
    if (c instanceof ObjectCodec) return [...c.fieldNames];
    return [];
  };
  const walk = (c: Codec<unknown>, path: string[], before: string[]): void => {
    const info = c.info;
    if (info.kind === 'select') {
      const head = [...before, ...fieldsOf(info.head)];
      for (const k of info.cases) walk(k.codec, [...path, `${info.on}=${k.value}`], head);
      return;
    }
    const name = info.kind === 'struct' ? (info.name ?? '') : '';
    rows.push({ branch: path.join(', '), type: name, fields: [...before, ...fieldsOf(c)] });
  };
  walk(envelope, [], []);
  return rows;
}
