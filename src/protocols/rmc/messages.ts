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
 * Bodies are declared structs; the envelope that picks a body from bytes in the middle of the
 * packet (isRequest, success) is a small custom codec around them. Args and results stay raw
 * bytes at this level: method signatures (signature.ts) give them their types.
 */
import {
  bytes,
  type Codec,
  custom,
  DecodeError,
  EncodeError,
  ErrorCode,
  type Infer,
  type Json,
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

// ---- string-named (HyperScape / verbose) ----------------------------------------------------

export const VerboseRequestBody = struct({
  callId: t.u32le,
  method: qString,
  classVersions: list(ClassVersion),
  args: restBytes,
});

export const VerboseSuccessBody = struct({
  callId: t.u32le,
  method: qString,
  results: restBytes,
});

/** HyperScape failure: the namespace written out as a String, then a u16 code. */
export const HyperscapeFailureBody = struct({
  namespace: qString,
  code: t.u16le,
  callId: t.u32le,
});

/** nex-go verbose failure: a u32 result code (MSB set), then the call id. */
export const NexFailureBody = struct({
  errorCode: t.u32le,
  callId: t.u32le,
});

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

/** Reads the part of a verbose packet after the u32 length: protocol and isRequest. */
export function readVerboseHead(r: WireReader): { protocol: string; isRequest: boolean } {
  let protocol: string;
  try {
    protocol = qString.read(r);
  } catch (e) {
    throw e instanceof DecodeError ? e.withPath('protocol') : e;
  }
  try {
    return { protocol, isRequest: r.bool() };
  } catch (e) {
    throw e instanceof DecodeError ? e.withPath('isRequest') : e;
  }
}

function readSuccessFlag(r: WireReader): boolean {
  try {
    return r.bool();
  } catch (e) {
    throw e instanceof DecodeError ? e.withPath('success') : e;
  }
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

function verboseEnvelope<E extends { type: 'error'; protocol: string }>(
  name: string,
  failure: Codec<Omit<E, 'type' | 'protocol'>>,
  failureJsonKeys: readonly string[],
) {
  return custom<VerboseRequestMessage | VerboseResponseMessage | E>({
    name,
    description:
      'u32 LE length, String protocol, bool isRequest; request: u32 callId, String method, List<ClassVersion>, args; ' +
      'response: bool success, then (u32 callId, String method*, results) or the failure body',
    minSize: 4 + 2 + 1,
    read: (r) => {
      const previous = enterFrame(r);
      const { protocol, isRequest } = readVerboseHead(r);
      let out: VerboseRequestMessage | VerboseResponseMessage | E;
      if (isRequest) {
        const b = VerboseRequestBody.read(r);
        out = {
          type: 'request',
          protocol,
          callId: b.callId,
          method: b.method,
          classVersions: b.classVersions,
          args: b.args,
        };
      } else if (readSuccessFlag(r)) {
        const b = VerboseSuccessBody.read(r);
        out = { type: 'response', protocol, callId: b.callId, method: b.method, results: b.results };
      } else {
        out = { type: 'error', protocol, ...failure.read(r) } as unknown as E;
      }
      leaveFrame(r, previous);
      return out;
    },
    write: (w, m) => {
      const at = beginFrame(w);
      qString.write(w, m.protocol);
      if (m.type === 'request') {
        w.bool(true);
        VerboseRequestBody.write(w, m);
      } else if (m.type === 'response') {
        w.bool(false);
        w.bool(true);
        VerboseSuccessBody.write(w, m);
      } else if (m.type === 'error') {
        w.bool(false);
        w.bool(false);
        failure.write(w, m as unknown as Omit<E, 'type' | 'protocol'>);
      } else {
        throw new EncodeError(
          ErrorCode.BAD_INPUT,
          `unknown RMC message type ${String((m as { type: unknown }).type)}`,
          'type',
        );
      }
      endFrame(w, at);
    },
    toJson: (m) => {
      if (m.type === 'request') {
        return {
          type: 'request',
          protocol: m.protocol,
          callId: m.callId,
          method: m.method,
          classVersions: m.classVersions.map((c) => ({ name: c.name, version: c.version })),
          args: m.args.toString('hex'),
        };
      }
      if (m.type === 'response') {
        return {
          type: 'response',
          protocol: m.protocol,
          callId: m.callId,
          method: m.method,
          results: m.results.toString('hex'),
        };
      }
      const out: Record<string, Json> = { type: 'error', protocol: m.protocol };
      const f = failure.toJson(m as unknown as Omit<E, 'type' | 'protocol'>) as Record<string, Json>;
      for (const k of failureJsonKeys) out[k] = f[k]!;
      return out;
    },
    fromJson: (j, path) => {
      const o = objectJson(j, path);
      const type = o.type;
      const protocol = qString.fromJson(o.protocol, sub(path, 'protocol'));
      const { type: _t, protocol: _p, ...rest } = o;
      if (type === 'request') {
        return { type, protocol, ...VerboseRequestBody.fromJson(rest, path) };
      }
      if (type === 'response') return { type, protocol, ...VerboseSuccessBody.fromJson(rest, path) };
      if (type === 'error') return { type, protocol, ...failure.fromJson(rest, path) } as unknown as E;
      throw new EncodeError(
        ErrorCode.BAD_INPUT,
        'expected type request, response or error',
        sub(path, 'type'),
      );
    },
  });
}

/** A HyperScape RMC packet (the default variant). */
export const hyperscapePacket = verboseEnvelope<HyperscapeErrorMessage>(
  'rmc.hyperscape',
  HyperscapeFailureBody,
  ['namespace', 'code', 'callId'],
);

/** A verbose RMC packet with nex-go's failure body (u32 code, u32 callId). */
export const nexVerbosePacket = verboseEnvelope<NexErrorMessage>('rmc.nex-verbose', NexFailureBody, [
  'errorCode',
  'callId',
]);

// ---- classic packed -------------------------------------------------------------------------

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

export const ClassicRequestBody = struct({ callId: t.u32le, methodId: t.u32le, args: restBytes });
export const ClassicFailureBody = struct({ errorCode: t.u32le, callId: t.u32le });
const ClassicSuccessHead = struct({ callId: t.u32le, methodId: t.u32le });

/** Reads the classic protocol byte (and the extended u16 id after 0x7F). */
export function readProtocolId(r: WireReader): { protocolId: number; isRequest: boolean } {
  const b = r.u8();
  const id = b & 0x7f;
  return { protocolId: id === 0x7f ? r.u16le() : id, isRequest: (b & 0x80) !== 0 };
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
export const classicPacket = custom<ClassicMessage>({
  name: 'rmc.classic',
  description:
    'u32 LE size, u8 protocol id | 0x80 on requests (0x7F: u16 extended id); request: u32 callId, u32 methodId, args; ' +
    'response: bool success, then (u32 callId, u32 methodId | 0x8000, results) or (u32 errorCode, u32 callId)',
  minSize: 5,
  read: (r) => {
    const previous = enterFrame(r);
    const { protocolId, isRequest } = readProtocolId(r);
    let out: ClassicMessage;
    if (isRequest) {
      out = { type: 'request', protocolId, ...ClassicRequestBody.read(r) };
    } else if (readSuccessFlag(r)) {
      const callId = r.u32le();
      const at = r.offset;
      const m = r.u32le();
      if ((m & 0x8000) === 0) {
        throw new DecodeError(
          ErrorCode.BAD_VALUE,
          `response method id 0x${m.toString(16)} lacks the 0x8000 bit`,
          at,
          'methodId',
        );
      }
      out = { type: 'response', protocolId, callId, methodId: (m & ~0x8000) >>> 0, results: r.rest() };
    } else {
      out = { type: 'error', protocolId, ...ClassicFailureBody.read(r) };
    }
    leaveFrame(r, previous);
    return out;
  },
  write: (w, m) => {
    const at = beginFrame(w);
    if (m.type === 'request') {
      writeProtocolId(w, m.protocolId, true);
      ClassicRequestBody.write(w, m);
    } else if (m.type === 'response') {
      writeProtocolId(w, m.protocolId, false);
      w.bool(true);
      w.u32le(m.callId);
      if (m.methodId > 0x7fff && (m.methodId & 0x8000) !== 0) {
        throw new EncodeError(
          ErrorCode.BAD_INPUT,
          'methodId must not carry the 0x8000 response bit',
          'methodId',
        );
      }
      w.u32le((m.methodId | 0x8000) >>> 0);
      w.bytes(m.results);
    } else if (m.type === 'error') {
      writeProtocolId(w, m.protocolId, false);
      w.bool(false);
      ClassicFailureBody.write(w, m);
    } else {
      throw new EncodeError(
        ErrorCode.BAD_INPUT,
        `unknown RMC message type ${String((m as { type: unknown }).type)}`,
        'type',
      );
    }
    endFrame(w, at);
  },
  toJson: (m): Json => {
    if (m.type === 'request') {
      return {
        type: 'request',
        protocolId: m.protocolId,
        callId: m.callId,
        methodId: m.methodId,
        args: m.args.toString('hex'),
      };
    }
    if (m.type === 'response') {
      return {
        type: 'response',
        protocolId: m.protocolId,
        callId: m.callId,
        methodId: m.methodId,
        results: m.results.toString('hex'),
      };
    }
    return { type: 'error', protocolId: m.protocolId, errorCode: m.errorCode, callId: m.callId };
  },
  fromJson: (j, path) => {
    const o = objectJson(j, path);
    const { type, protocolId: pid, ...rest } = o;
    const protocolId = t.u16le.fromJson(pid, sub(path, 'protocolId'));
    if (type === 'request') return { type, protocolId, ...ClassicRequestBody.fromJson(rest, path) };
    if (type === 'response') {
      const { results, ...head } = rest;
      const h = ClassicSuccessHead.fromJson(head, path);
      if (h.methodId > 0x7fff)
        throw new EncodeError(ErrorCode.BAD_INPUT, 'methodId must be under 0x8000', sub(path, 'methodId'));
      return {
        type,
        protocolId,
        callId: h.callId,
        methodId: h.methodId,
        results: restBytes.fromJson(results, sub(path, 'results')),
      };
    }
    if (type === 'error') return { type, protocolId, ...ClassicFailureBody.fromJson(rest, path) };
    throw new EncodeError(ErrorCode.BAD_INPUT, 'expected type request, response or error', sub(path, 'type'));
  },
});

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
