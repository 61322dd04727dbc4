/**
 * Turns the wire tap's raw messages into the contract's `WireMessage`: decoded lazily with the
 * same codec as `gamewire decode`, secrets masked in the fields and blanked in the hex.
 */
import type { Json } from '../../wire/codec.js';
import type { CodecOptions, Direction, ProtocolCodec } from '../protocol.js';
import type { TappedMessage } from '../wire-tap.js';
import type { WireMessageJson } from './api-types.js';
import { blankValues, redactFields } from './redact.js';

export type { WireMessageJson } from './api-types.js';

/**
 * Decodes one message's bytes: what `gamewire decode <codec> --from <direction>` prints. A
 * protocol's own decoder may mask secrets that field names alone do not reveal: it replaces them
 * with `REDACTED` and pushes their bytes to `secrets`, which are then blanked in the hex.
 */
export type WireDecoder = (bytes: Buffer, direction: Direction, transport: string, secrets: Buffer[]) => Json;

/** A decoder over one codec (the protocol's own), as `gamewire decode <codec> --from <direction>`. */
export function codecDecoder(codec: ProtocolCodec, options: Omit<CodecOptions, 'from'> = {}): WireDecoder {
  return (bytes, direction) => codec.decode(bytes, { ...options, from: direction });
}

const NAME_KEYS = ['type', 'name', 'message', 'method', 'kind', 'opcode', 'op'] as const;

/** A short name for a decoded message: its type/name field, or the first of an array. */
export function messageName(fields: Json): string | null {
  if (Array.isArray(fields)) {
    const first = fields.length > 0 ? messageName(fields[0]!) : null;
    return first === null ? null : fields.length > 1 ? `${first} +${fields.length - 1}` : first;
  }
  if (fields === null || typeof fields !== 'object') return null;
  for (const k of NAME_KEYS) {
    const v = fields[k];
    if (typeof v === 'string' && v !== '') return v;
  }
  for (const v of Object.values(fields)) {
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      const inner = messageName(v);
      if (inner !== null) return inner;
    }
  }
  return null;
}

/**
 * `hideUndecoded`: a message that does not decode shows no hex (its secrets could not be found),
 * for protocols whose secrets are not masked in the bytes when copied.
 */
export function wireMessageJson(
  m: TappedMessage,
  decode: WireDecoder | undefined,
  hideUndecoded = false,
): WireMessageJson {
  let fields: Json | null = null;
  let error: string | null = null;
  const bytes = Buffer.from(m.bytes);
  if (decode !== undefined) {
    try {
      const found: Buffer[] = [];
      fields = redactFields(decode(m.bytes, m.direction, m.transport, found), found);
      blankValues(bytes, found);
    } catch (err) {
      error = m.truncated
        ? `not decoded: the message was cut at ${m.bytes.length} of ${m.length} bytes`
        : (err as Error).message;
    }
  } else error = 'no decoder for this protocol';
  const hidden = fields === null && hideUndecoded;
  if (hidden) error = `${error} (bytes hidden: a message that does not decode could hold a secret)`;
  return {
    seq: m.seq,
    at: m.at,
    direction: m.direction,
    connection: m.connection,
    transport: m.transport,
    name: fields === null ? null : messageName(fields),
    fields,
    hex: hidden ? '' : bytes.toString('hex'),
    length: m.length,
    truncated: m.truncated,
    error,
  };
}
