/**
 * Helpers around the declared RMC envelope (messages.ts) for the server's hot path: pre-encoded
 * names matched as bytes without decoding, the class-version list, and the failure frame in each
 * variant (written with the declaration).
 */
import { DecodeError, ErrorCode, type WireReader, WireWriter } from '../../wire/index.js';
import { toResultCode } from './errors.js';
import {
  beginFrame,
  ClassicEnvelope,
  endFrame,
  HyperscapeEnvelope,
  NexVerboseEnvelope,
  type RmcVariant,
} from './messages.js';
import { type ClassVersion, ClassVersion as ClassVersionCodec, qString } from './types.js';

/** The fields of a call a failure answer echoes. */
export interface CallEcho {
  readonly protocol: string;
  readonly callId: number;
  /** Classic packed variant only. */
  readonly protocolId: number | undefined;
}

/** `s` as an encoded String (u16 length, UTF-8, NUL), to write or match as bytes. */
export function encodeString(s: string): Buffer {
  const w = new WireWriter({ initialCapacity: 64 });
  qString.write(w, s);
  return w.toBuffer();
}

/** True (and consumed) when the bytes at the reader's offset equal `s` (an encoded String). */
export function matchAt(r: WireReader, s: Buffer): boolean {
  const o = r.offset;
  const n = s.length;
  if (o + n > r.end) return false;
  const b = r.buf;
  for (let i = 0; i < n; i++) if (b[o + i] !== s[i]) return false;
  r.offset = o + n;
  return true;
}

export function readClassVersions(r: WireReader): ClassVersion[] {
  const at = r.offset;
  const n = r.u32le();
  if (n === 0) return [];
  if (n > r.limits.maxArrayLength || n * 3 > r.remaining) {
    throw new DecodeError(
      n > r.limits.maxArrayLength ? ErrorCode.TOO_LARGE : ErrorCode.OVERRUN,
      `List<ClassVersion> of ${n} does not fit`,
      at,
      'classVersions',
    );
  }
  const out: ClassVersion[] = [];
  for (let i = 0; i < n; i++) {
    try {
      out.push(ClassVersionCodec.read(r));
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath(`classVersions[${i}]`) : e;
    }
  }
  return out;
}

/** Appends one failure frame in `variant` (the declared envelope); may throw EncodeError with a partial frame in `w`. */
export function writeFailure(
  w: WireWriter,
  variant: RmcVariant,
  call: CallEcho,
  namespace: string,
  code: number,
): void {
  const at = beginFrame(w);
  const errorCode = (): number => toResultCode(namespace, code) ?? (0x80000000 | code) >>> 0;
  if (call.protocolId !== undefined) {
    ClassicEnvelope.write(w, {
      type: 'error',
      protocolId: call.protocolId,
      isRequest: false,
      success: false,
      errorCode: errorCode(),
      callId: call.callId,
    });
  } else if (variant === 'hyperscape') {
    HyperscapeEnvelope.write(w, {
      type: 'error',
      protocol: call.protocol,
      isRequest: false,
      success: false,
      namespace,
      code,
      callId: call.callId,
    });
  } else {
    NexVerboseEnvelope.write(w, {
      type: 'error',
      protocol: call.protocol,
      isRequest: false,
      success: false,
      errorCode: errorCode(),
      callId: call.callId,
    });
  }
  endFrame(w, at);
}
