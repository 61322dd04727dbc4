/**
 * The `nox-relay` entry of `gamewire decode/encode`: a TCP stream or UDP datagram of packets
 * <-> JSON. `--from client` (the default) reads client → server type codes, `--from server` the
 * server → client ones (0x11 is Sessions going up and Leave coming down).
 */
import type { CodecOptions, ProtocolCodec } from '../../core/protocol.js';
import {
  badInput,
  DecodeError,
  EncodeError,
  ErrorCode,
  type Json,
  WireReader,
  WireWriter,
} from '../../wire/index.js';
import { clientMessages, serverMessages } from './messages.js';
import { packetMeasure, readClientPacket, readServerPacket, splitPackets } from './packet.js';

/** Packets up to the u16 length field's maximum decode on the command line. */
const measure = packetMeasure(0xffff);

function isServer(options: CodecOptions): boolean {
  return options.from === 'server';
}

export function decodePackets(bytes: Buffer, options: CodecOptions): Json[] {
  if (bytes.length === 0) throw new DecodeError(ErrorCode.INCOMPLETE, 'no bytes: a packet has at least 5', 0);
  const ranges = splitPackets(bytes, 0, bytes.length, measure, []);
  const r = new WireReader();
  const out: Json[] = [];
  const server = isServer(options);
  for (let i = 0; i < ranges.length; i += 2) {
    r.reset(bytes, ranges[i]!, ranges[i + 1]!);
    const packet = server ? readServerPacket(r) : readClientPacket(r);
    const body = (server ? serverMessages : clientMessages).toJson(packet.message as never) as Record<
      string,
      Json
    >;
    const { type, ...fields } = body;
    out.push({ type: type!, uid: packet.uid, ...fields });
  }
  return out;
}

export function encodePackets(json: unknown, options: CodecOptions): Buffer {
  const list = Array.isArray(json) ? json : [json];
  if (list.length === 0) throw badInput('', 'nothing to encode');
  const messages = isServer(options) ? serverMessages : clientMessages;
  const w = new WireWriter();
  list.forEach((item, i) => {
    const path = Array.isArray(json) ? `[${i}]` : '';
    if (typeof item !== 'object' || item === null || Array.isArray(item))
      throw badInput(path, 'expected an object');
    const { uid = 0, ...rest } = item as Record<string, unknown>;
    if (typeof uid !== 'number' || !Number.isInteger(uid) || uid < 0 || uid > 0xffff) {
      throw badInput(path === '' ? 'uid' : `${path}.uid`, 'uid must be an integer 0..65535');
    }
    const message = messages.fromJson(rest, path);
    const at = w.reserve(2);
    w.u16be(uid);
    try {
      messages.write(w, message as never);
    } catch (e) {
      if (e instanceof EncodeError && path !== '') throw e.withPath(path);
      throw e;
    }
    const length = w.offset - at;
    if (length > 0xffff)
      throw new EncodeError(ErrorCode.TOO_LARGE, `packet of ${length} bytes exceeds 65535`, path);
    w.patchU16be(at, length);
  });
  return w.toBuffer();
}

export const noxRelayCodec: ProtocolCodec = {
  name: 'nox-relay',
  summary: 'NoxVR Relay v1 packets ([length][uid][type][payload], big-endian); --from client|server',
  canEncode: true,
  decode(bytes, options) {
    const list = decodePackets(bytes, options);
    return list.length === 1 ? list[0]! : list;
  },
  encode(json, options) {
    return encodePackets(json, options);
  },
};
