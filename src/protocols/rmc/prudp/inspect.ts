/**
 * PRUDP V0 inside the inspector: every packet of a datagram (checked with the access key's
 * checksum), DATA payloads on the secure streams decrypted (RC4 "CD&ML" or `--prudp-rc4-key`,
 * reset per packet) and inflated, fragments joined per direction in sequence order,
 * retransmissions shown once, and each whole RMC message decoded with the `rmc` codec. Without
 * `--access-key` the checksum cannot be checked, and the packets are reported as such rather
 * than guessed. The generated Wireshark dissector does the same in Lua (dissector.ts).
 */

import { UsageError } from '../../../core/errors.js';
import type {
  BaseDecoderOptions,
  DecoderFlag,
  Emitter,
  FlowDecoder,
  FlowProtocol,
} from '../../../core/flow.js';
import type { Direction } from '../../../core/protocol.js';
import type { Json } from '../../../wire/codec.js';
import { asDecodeError, DecodeError, ErrorCode } from '../../../wire/errors.js';
import { decodeStream } from '../codec.js';
import type { RmcVariant } from '../messages.js';
import { BUILTIN_PROTOCOLS } from '../protocols/index.js';
import type { ProtocolDef } from '../signature.js';
import { accessKeyByte } from './checksum.js';
import { CLASSIC_RC4_KEY, FLAG_NAMES, PACKET_TYPE_NAMES, PacketType, StreamType } from './constants.js';
import { type ChecksumConfig, newPacket, readPacket } from './packet.js';
import { ClassicPayloadCodec } from './payload.js';
import { Rc4Key } from './rc4.js';

export interface PrudpInspectOptions {
  /** RMC envelope variant of the messages inside. */
  rmcVariant: RmcVariant;
  /** The game's access key (the checksum depends on it); without it packets are not decoded. */
  prudpAccessKey: string | undefined;
  /** PRUDP checksum width: 1 (classic) or 4 bytes. */
  prudpChecksum: 1 | 4;
  /** The declared protocols (`--protocols` packs first, then the built-ins): named args and results. */
  rmcProtocols: readonly ProtocolDef<any>[];
  /** RC4 key of classic DATA payloads (latin1 bytes). */
  prudpRc4Key: string;
}

/** Sequence ids remembered per connection and direction to show a retransmission once. */
const MAX_REMEMBERED = 4096;
/** Connections (virtual ports and session id) of one flow whose reassembly state is kept. */
const MAX_CONNECTIONS = 64;

/** What one direction of one PRUDP connection has seen: its sequence ids, a message's fragments. */
interface Reassembly {
  seen: Set<number>;
  parts: Buffer[];
  bytes: number;
}

function coded(vport: number): boolean {
  const s = vport >> 4;
  return s === StreamType.OLD_RV_SECURE || s === StreamType.RV_SECURE;
}

function prudpDecoder(out: Emitter, options: BaseDecoderOptions & PrudpInspectOptions): FlowDecoder {
  const key = options.prudpAccessKey;
  const cfg: ChecksumConfig | undefined =
    key === undefined ? undefined : { width: options.prudpChecksum, keyByte: accessKeyByte(key) };
  const packet = newPacket();
  const codec = new ClassicPayloadCodec(new Rc4Key(Buffer.from(options.prudpRc4Key, 'latin1')));
  let warned = false;
  // Per connection: one UDP flow may carry several PRUDP connections one after the other (a
  // client reconnecting from the same port), each numbering its packets from 1 again.
  const state = new Map<string, Reassembly>();
  const connection = (d: Direction): Reassembly => {
    const key = `${d}:${packet.source}:${packet.destination}:${packet.sessionId}`;
    let s = state.get(key);
    if (s === undefined) {
      if (state.size >= MAX_CONNECTIONS) state.delete(state.keys().next().value!);
      s = { seen: new Set<number>(), parts: [], bytes: 0 };
      state.set(key, s);
    }
    return s;
  };

  const data = (d: Direction, json: Record<string, Json>): void => {
    if ((packet.flags & 0x08) !== 0 || !coded(packet.source)) return; // ACKs carry no data
    const s = connection(d);
    if (s.seen.has(packet.sequenceId)) {
      json.retransmission = true;
      return;
    }
    if (s.seen.size >= MAX_REMEMBERED) s.seen.delete(s.seen.values().next().value!);
    s.seen.add(packet.sequenceId);
    let plain: Buffer;
    try {
      plain = codec.decode(packet.payload, options.maxFrameBytes);
    } catch (e) {
      json.payloadError = { code: asDecodeError(e, 0).code, message: asDecodeError(e, 0).message };
      return;
    }
    json.compression = codec.lastCompression;
    // Fragments 1, 2, … then 0 for the last (or the only) one.
    s.bytes += plain.length;
    if (s.bytes > options.maxFrameBytes) {
      s.parts = [];
      s.bytes = 0;
      throw new DecodeError(ErrorCode.TOO_LARGE, `fragmented message over ${options.maxFrameBytes} bytes`, 0);
    }
    s.parts.push(Buffer.from(plain));
    if (packet.fragmentId !== 0) return;
    const message = s.parts.length === 1 ? s.parts[0]! : Buffer.concat(s.parts);
    s.parts = [];
    s.bytes = 0;
    json.rmcBytes = message.length;
    pendingRmc = message;
  };

  let pendingRmc: Buffer | undefined;

  return {
    stream(d) {
      out.error(d, new DecodeError(ErrorCode.BAD_INPUT, 'PRUDP travels over UDP', 0));
    },
    datagram(d, payload) {
      if (cfg === undefined) {
        if (!warned) {
          warned = true;
          out.error(
            d,
            new DecodeError(
              'ERR_PRUDP_NEEDS_ACCESS_KEY',
              'give --access-key to check and decode PRUDP packets',
              0,
            ),
          );
        }
        return;
      }
      let off = 0;
      while (off < payload.length) {
        let next: number;
        try {
          next = readPacket(payload, off, cfg, packet);
        } catch (e) {
          out.error(d, asDecodeError(e, off));
          return;
        }
        const json: Record<string, Json> = {
          type: PACKET_TYPE_NAMES[packet.type]!,
          source: packet.source,
          destination: packet.destination,
          flags: FLAG_NAMES.filter(([, bit]) => (packet.flags & bit) !== 0).map(([n]) => n),
          sessionId: packet.sessionId,
          packetSignature: packet.packetSignature,
          sequenceId: packet.sequenceId,
        };
        if (packet.type <= PacketType.CONNECT) json.connectionSignature = packet.connectionSignature;
        if (packet.type === PacketType.DATA) json.fragmentId = packet.fragmentId;
        json.payloadLength = packet.payload.length;
        pendingRmc = undefined;
        try {
          if (packet.type === PacketType.DATA && packet.payload.length > 0) data(d, json);
        } catch (e) {
          out.message(d, json);
          out.error(d, asDecodeError(e, off));
          off = next;
          continue;
        }
        out.message(d, json);
        if (pendingRmc !== undefined) {
          const rmcBytes: Buffer = pendingRmc;
          try {
            for (const m of decodeStream(rmcBytes, options.rmcVariant, options.rmcProtocols))
              out.message(d, m);
          } catch (e) {
            out.error(d, asDecodeError(e, 0));
          }
        }
        off = next;
      }
    },
    gap() {},
  };
}

/**
 * The PRUDP flags of `gamewire inspect` and `gamewire dissector` (after rmc's `--rmc-variant`,
 * which PRUDP flows read too): in the dissector, the defaults of the `gw_prudp` preferences.
 */
export const PRUDP_INSPECT_FLAGS: readonly DecoderFlag[] = [
  {
    flag: '--access-key <key>',
    description: "PRUDP: the game's access key (checksums are checked with it)",
    apply: (value) => ({ prudpAccessKey: typeof value === 'string' ? value : undefined }),
  },
  {
    flag: '--prudp-checksum <width>',
    description: 'PRUDP checksum width: 1 or 4 bytes',
    default: '1',
    choices: ['1', '4'],
    apply: (value) => ({ prudpChecksum: value === '4' ? 4 : 1 }),
  },
  {
    flag: '--prudp-rc4-key <key>',
    description: 'PRUDP: RC4 key of DATA payloads (restarted per packet)',
    default: CLASSIC_RC4_KEY,
    apply: (value) => {
      const key = typeof value === 'string' ? value : CLASSIC_RC4_KEY;
      const n = Buffer.byteLength(key, 'latin1');
      if (n === 0 || n > 256) throw new UsageError('--prudp-rc4-key takes 1 to 256 bytes');
      return { prudpRc4Key: key };
    },
  },
];

export const prudpFlow: FlowProtocol<PrudpInspectOptions> = {
  name: 'prudp',
  tcpPorts: [],
  // The RMC server's PRUDP transport shares its port number with RMC over TCP.
  udpPorts: [9103],
  defaults: {
    rmcVariant: 'hyperscape',
    prudpAccessKey: undefined,
    prudpChecksum: 1,
    rmcProtocols: BUILTIN_PROTOCOLS,
    prudpRc4Key: CLASSIC_RC4_KEY,
  },
  create: prudpDecoder,
};
