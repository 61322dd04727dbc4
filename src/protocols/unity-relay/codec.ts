/**
 * `gamewire decode|encode unity-relay`. A datagram holds one message; several messages back to
 * back (e.g. datagrams concatenated from a capture) decode to an array, in order. Every message
 * has a known length (RELAY from its length field), so they split without framing.
 */
import type { ProtocolCodec } from '../../core/protocol.js';
import type { Json } from '../../wire/codec.js';
import { asDecodeError, DecodeError, EncodeError, ErrorCode } from '../../wire/errors.js';
import { WireReader } from '../../wire/reader.js';
import { WireWriter } from '../../wire/writer.js';
import { RelayFrame, type RelayMessage, RelayMessages } from './messages.js';

/** Decodes every message in `bytes`, back to back. Throws DecodeError only. */
export function decodeAll(bytes: Uint8Array): RelayMessage[] {
  const r = new WireReader(bytes);
  const out: RelayMessage[] = [];
  try {
    do {
      if (out.length > 0 && (r.remaining < 4 || r.buf[r.offset] !== 0xda || r.buf[r.offset + 1] !== 0x72)) {
        // Not another message: what follows belongs to (or trails) the previous one.
        throw new DecodeError(
          ErrorCode.TRAILING_BYTES,
          `${r.remaining} byte(s) left after the message`,
          r.offset,
        );
      }
      out.push(RelayFrame.read(r).message);
    } while (r.remaining > 0);
  } catch (e) {
    const err = asDecodeError(e, r.offset);
    // The frame struct names its union field `message`; paths start at the message instead.
    const path = err.path.replace(/^message\.?/, '');
    const nth = out.length > 0 && err.code !== ErrorCode.TRAILING_BYTES;
    const prefixed = nth ? `[${out.length}]${path === '' ? '' : `.${path}`}` : path;
    throw new DecodeError(err.code, err.detail, err.offset, prefixed);
  }
  return out;
}

export const unityRelayCodec: ProtocolCodec = {
  name: 'unity-relay',
  summary:
    'Unity Relay message protocol (BIND, PING, CONNECT_REQUEST, RELAY, ERROR, …), one message per datagram',
  canEncode: true,
  decode(bytes: Buffer): Json {
    const messages = decodeAll(bytes);
    const json = messages.map((m) => RelayMessages.toJson(m));
    return json.length === 1 ? json[0]! : json;
  },
  encode(json: unknown): Buffer {
    const list = Array.isArray(json) ? json : [json];
    if (list.length === 0) throw new EncodeError(ErrorCode.BAD_INPUT, 'expected at least one message');
    const w = new WireWriter();
    list.forEach((item, i) => {
      const path = Array.isArray(json) ? `[${i}]` : '';
      const message = RelayMessages.fromJson(item, path);
      try {
        RelayFrame.write(w, { message });
      } catch (e) {
        throw e instanceof EncodeError && path !== '' ? e.withPath(path) : e;
      }
    });
    return w.toBuffer();
  },
};
