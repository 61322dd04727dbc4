/**
 * The packet header `[length u16][uid u16][type u8]` around the declared payloads, and the
 * walks over a TCP stream (StreamDeframer) or a UDP datagram holding several packets.
 */
import {
  DecodeError,
  EncodeError,
  ErrorCode,
  type FrameMeasure,
  lengthPrefixed,
  type UnionCodec,
  type WireReader,
  type WireWriter,
} from '../../wire/index.js';
import { DEFAULT_MAX_PACKET, HEADER_BYTES } from './constants.js';
import { type ClientMessage, clientMessages, type ServerMessage, serverMessages } from './messages.js';

export interface Packet<M> {
  uid: number;
  message: M;
}

/** Length-prefix measure: length < 5 is ERR_BAD_LENGTH, over `maxPacket` ERR_TOO_LARGE. */
export function packetMeasure(maxPacket = DEFAULT_MAX_PACKET): FrameMeasure {
  return lengthPrefixed({
    prefix: 'u16be',
    counts: 'frame',
    minFrameBytes: HEADER_BYTES,
    maxFrameBytes: maxPacket,
  });
}

type AnyUnion = UnionCodec<any>;

/** Reads one packet; the reader's bound must be exactly that packet (a frame). */
function readWith<M>(r: WireReader, messages: AnyUnion): Packet<M> {
  const start = r.offset;
  const length = r.u16be();
  if (length !== r.end - start) {
    throw new DecodeError(
      ErrorCode.BAD_LENGTH,
      `packet length ${length} does not match the ${r.end - start} byte(s) framed`,
      start,
    );
  }
  const uid = r.u16be();
  const message = messages.read(r) as M;
  r.expectEnd('packet');
  return { uid, message };
}

export function readClientPacket(r: WireReader): Packet<ClientMessage> {
  return readWith(r, clientMessages);
}

export function readServerPacket(r: WireReader): Packet<ServerMessage> {
  return readWith(r, serverMessages);
}

/** Appends one packet to `w` (not reset): header, payload, then the length patched in. */
function writeWith(w: WireWriter, uid: number, messages: AnyUnion, message: unknown): void {
  const at = w.reserve(2);
  w.u16be(uid);
  messages.write(w, message as never);
  const length = w.offset - at;
  if (length > 0xffff) {
    w.offset = at;
    throw new EncodeError(ErrorCode.TOO_LARGE, `packet of ${length} bytes exceeds the u16 length field`);
  }
  w.patchU16be(at, length);
}

export function writeServerPacket(w: WireWriter, uid: number, message: ServerMessage): void {
  writeWith(w, uid, serverMessages, message);
}

export function writeClientPacket(w: WireWriter, uid: number, message: ClientMessage): void {
  writeWith(w, uid, clientMessages, message);
}

/**
 * Splits a buffer of back-to-back packets (a UDP datagram, or a whole capture) into
 * `[start, end)` ranges. Validates every header before returning, so a datagram is either used
 * whole or dropped whole. A packet cut short is ERR_INCOMPLETE.
 */
export function splitPackets(
  buf: Buffer,
  start: number,
  end: number,
  measure: FrameMeasure,
  out: number[],
): number[] {
  out.length = 0;
  let off = start;
  while (off < end) {
    const len = measure(buf, off, end - off);
    if (len < 0 || off + len > end) {
      throw new DecodeError(ErrorCode.INCOMPLETE, `packet at ${off - start} is cut short`, off - start);
    }
    out.push(off, off + len);
    off += len;
  }
  return out;
}
