/**
 * NoxVR in the inspector and in Wireshark: packets over TCP and UDP; Segmentation sessions are
 * reassembled (with `storeSegment`, the relay's own reassembly) and Reliable batches unpacked,
 * each inner packet emitted on its own.
 */
import {
  type BaseDecoderOptions,
  type DissectorDeclaration,
  type Emitter,
  type FlowDecoder,
  type FlowProtocol,
  FramedDirection,
  type ProtocolInspection,
  perDirection,
} from '../../core/flow.js';
import type { Direction } from '../../core/protocol.js';
import type { Json } from '../../wire/codec.js';
import { asDecodeError, DecodeError, ErrorCode } from '../../wire/errors.js';
import { WireReader } from '../../wire/reader.js';
import { clientMessages, serverMessages } from './messages.js';
import { packetMeasure, readClientPacket, readServerPacket, splitPackets } from './packet.js';
import { DropReason } from './reasons.js';
import { type SegmentHooks, type SegmentLimits, storeSegment } from './reassembly.js';
import type { SegmentSession } from './session.js';

export interface NoxInspectOptions {
  /** Segmentation sessions held per flow and direction (the oldest is forgotten beyond). */
  maxSegmentSessions: number;
  /** Largest reassembled packet. */
  maxReassembledBytes: number;
}

/** The end of a Handshake packet followed only by zero bytes (padding), or -1. */
function paddedHandshakeEnd(b: Buffer): number {
  if (b.length < 5 || b[4] !== 0x01) return -1;
  const len = b.readUInt16BE(0);
  if (len < 5 || len > b.length) return -1;
  for (let i = len; i < b.length; i++) if (b[i] !== 0) return -1;
  return len;
}

function noxDecoder(out: Emitter, options: BaseDecoderOptions & NoxInspectOptions): FlowDecoder {
  const reader = new WireReader();
  const ranges: number[] = [];
  const udpMeasure = packetMeasure(0xffff);
  const sessions = perDirection(() => new Map<number, SegmentSession>());
  const limits: SegmentLimits = {
    maxSegments: Number.MAX_SAFE_INTEGER,
    maxSegmentSessions: options.maxSegmentSessions,
    maxReassembledBytes: options.maxReassembledBytes,
    segmentationTimeoutMs: Number.POSITIVE_INFINITY,
    // A capture is read, not defended: the newest sessions are the ones worth showing.
    evictOldest: true,
  };
  const hooks = perDirection(
    (d): SegmentHooks => ({
      drop(reason, m) {
        if (reason === DropReason.BadSegment) {
          out.error(
            d,
            new DecodeError(
              ErrorCode.BAD_VALUE,
              `segment ${m.currentSegment} of ${m.totalSegments} is out of range`,
              0,
            ),
          );
        } else if (reason === DropReason.SegmentTooLarge) {
          out.error(
            d,
            new DecodeError(
              ErrorCode.TOO_LARGE,
              `segmented packet ${m.segmentId} exceeds ${options.maxReassembledBytes} bytes`,
              0,
            ),
          );
        }
        // A session restarted with another total is simply begun again.
      },
    }),
  );

  /** Decodes one whole packet `buf[start, end)`; nested packets recurse (bounded by size). */
  const packet = (
    d: Direction,
    buf: Buffer,
    start: number,
    end: number,
    base: number,
    depth: number,
  ): void => {
    reader.reset(buf, start, end);
    let p: { uid: number; message: any };
    try {
      p = d === 'client' ? readClientPacket(reader) : readServerPacket(reader);
    } catch (e) {
      out.error(d, asDecodeError(e, reader.offset).atBase(base - start));
      return;
    }
    const union = d === 'client' ? clientMessages : serverMessages;
    const { type, ...fields } = union.toJson(p.message as never) as Record<string, Json>;
    out.message(d, { type: type!, uid: p.uid, ...fields });
    if (depth > 4) return;
    const m = p.message;
    if (m.type === 'Reliable') {
      for (const inner of m.messages as Buffer[]) {
        if (inner.length < 5) continue;
        packet(d, inner, 0, inner.length, base, depth + 1);
      }
    } else if (m.type === 'Segmentation') {
      const reassembled = storeSegment(sessions[d], m, 0, limits, hooks[d]);
      if (reassembled !== undefined) packet(d, reassembled, 0, reassembled.length, base, depth + 1);
    }
  };

  const tcp = perDirection(
    (d) =>
      new FramedDirection(
        d,
        out,
        packetMeasure(Math.min(0xffff, options.maxFrameBytes)),
        0xffff,
        (frame, at) => packet(d, frame, 0, frame.length, at, 0),
      ),
  );
  return {
    stream(d, bytes) {
      tcp[d].push(bytes);
    },
    datagram(d, payload) {
      try {
        splitPackets(payload, 0, payload.length, udpMeasure, ranges);
      } catch (e) {
        // A first Handshake may be padded with zero bytes up to the size of its reply.
        const end = paddedHandshakeEnd(payload);
        if (end < 0) {
          out.error(d, asDecodeError(e, 0));
          return;
        }
        packet(d, payload, 0, end, 0, 0);
        return;
      }
      // `ranges` is reused by nested decodes only through this loop's copy.
      const list = ranges.slice();
      for (let i = 0; i < list.length; i += 2) packet(d, payload, list[i]!, list[i + 1]!, list[i]!, 0);
    },
    gap(d, offset, length) {
      tcp[d].gap(offset, length);
    },
  };
}

function noxLooksLike(b: Buffer): boolean {
  if (b.length < 5) return false;
  const len = b.readUInt16BE(0);
  return len >= 5 && len <= b.length && b[4]! <= 0x12;
}

export const noxFlow: FlowProtocol<NoxInspectOptions> = {
  name: 'nox-relay',
  tcpPorts: [23032],
  udpPorts: [23032],
  defaults: { maxSegmentSessions: 64, maxReassembledBytes: 0xffff },
  create: noxDecoder,
  // A client opens with a Handshake (type 0x01).
  detect: (_tr, b) => (noxLooksLike(b) && b[4] === 0x01 ? 'client' : undefined),
  // What the relay makes up per connection or per run (docs/inspect.md, "Recording and replay").
  replay: {
    consistent: [
      // Handshake: a counter, the client's own address, and a cookie from a per-run secret.
      'clientId',
      'clientIp',
      'clientPort',
      'addressCookie',
      // Player ids come from a counter per instance; whatever field names one, it is one player.
      ['playerId', 'moderatorId'],
      // Offline mode names a player `Player <client id>`.
      'displayName',
    ],
    // The server's clock: a Latency reply's serverTimestamp, a player's createdAt.
    ignore: ['serverTimestamp', 'createdAt'],
  },
};

/** The dissector: messages from the declarations; framing, Reliable and Segmentation in Lua. */
export const noxDissector: DissectorDeclaration = {
  protocol: 'nox-relay',
  abbrev: 'gw_nox',
  title: 'gamewire NoxVR Relay',
  description: 'NoxVR Relay v1 over TCP and UDP.',
  schema: [
    ['UP', { union: clientMessages, path: '' }],
    ['DOWN', { union: serverMessages, path: '' }],
    [
      'F_UID',
      {
        field: {
          path: 'uid',
          label: 'uid',
          type: 'uint16',
          display: 'base.DEC',
          doc: 'request id echoed in the reply (0xFFFF: system)',
        },
      },
    ],
    ['F_LEN', { field: { path: 'hdr.length', label: 'length', type: 'uint16', display: 'base.DEC' } }],
  ],
  custom: {
    'nox-relay.optional-string': {
      type: 'string',
      display: 'base.UNICODE',
      lua: `if off >= lim then return off, nil end
return gw.walk({ k = "string", len = { t = "prefix", p = { n = 2, le = false } }, f = node.f }, tvb, off, lim, tree)`,
    },
    'nox-relay.optional-u16': {
      type: 'uint16',
      display: 'base.DEC',
      lua: `if lim - off < 2 then return off, nil end
return gw.walk({ k = "int", n = 2, le = false, signed = false, f = node.f }, tvb, off, lim, tree)`,
    },
    'nox-relay.enter-threshold': {
      type: 'float',
      display: '',
      second: 'uint8',
      lua: `if lim - off == 1 then return gw.walk({ k = "int", n = 1, f = node.f2 }, tvb, off, lim, tree) end
return gw.walk({ k = "float", n = 4, le = false, f = node.f }, tvb, off, lim, tree)`,
    },
    'nox-relay.address-cookie': {
      type: 'bytes',
      display: 'base.NONE',
      lua: `if off >= lim then return off, nil end
return gw.walk({ k = "bytes", len = { t = "fixed", n = 8 }, f = node.f }, tvb, off, lim, tree)`,
    },
  },
  glue: `
local state = {}
local function conv(pinfo)
  local k = gw.conv_key(pinfo)
  local s = state[k]
  if s == nil then s = { segments = { client = {}, server = {} } }; state[k] = s end
  return s
end

local packet

-- Segmentation: reassemble by segment id per direction; returns the whole inner packet once complete.
local function segment(s, dir, id, total, index, data)
  local map = s.segments[dir]
  local sess = map[id]
  if sess == nil then sess = { total = total, parts = {}, count = 0 }; map[id] = sess end
  if sess.parts[index] == nil then sess.count = sess.count + 1 end
  sess.parts[index] = data
  if sess.count < sess.total then return nil end
  map[id] = nil
  local ba = ByteArray.new()
  for i = 0, sess.total - 1 do ba:append(sess.parts[i]) end
  return ba
end

packet = function(tvb, off, stop, pinfo, tree, isClient, depth)
  local item = tree:add(P, tvb(off, stop - off))
  item:add(F_LEN, tvb(off, 2))
  item:add(F_UID, tvb(off + 2, 2))
  local union = isClient and UP or DOWN
  local tag = tvb(off + 4, 1):uint()
  local name = union.names[tag] or ("type " .. tag)
  item:add(F_MSG, tvb(off + 4, 1), name)
  item:add(F_DIR, tvb(off + 4, 1), isClient and "client" or "server")
  item:append_text(": " .. name)
  local ok, _, v = pcall(gw.walk, union, tvb, off + 4, stop, item)
  if not ok then
    item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed " .. name)
    return
  end
  if depth > 4 then return end
  if name == "Reliable" then
    local n = tvb(off + 5, 1):uint()
    local p = off + 6
    for _ = 1, n do
      local l = tvb(p, 2):uint()
      if l >= 5 then packet(tvb, p + 2, p + 2 + l, pinfo, tree, isClient, depth + 1) end
      p = p + 2 + l
    end
  elseif name == "Segmentation" and not pinfo.visited then
    local s = conv(pinfo)
    local whole = segment(s, isClient and "client" or "server", v.segmentId, v.totalSegments, v.currentSegment,
      gw.range(tvb, off + 11, stop - off - 11):bytes())
    if whole ~= nil and whole:len() >= 5 then
      local t = whole:tvb("Reassembled NoxVR packet")
      packet(t, 0, t:len(), pinfo, tree, isClient, depth + 1)
    end
  end
end

local function padded_handshake_end(tvb)
  local n = tvb:len()
  if n < 5 or tvb(4, 1):uint() ~= 1 then return -1 end
  local l = tvb(0, 2):uint()
  if l < 5 or l > n then return -1 end
  for i = l, n - 1 do if tvb(i, 1):uint() ~= 0 then return -1 end end
  return l
end

local function server_port(pinfo)
  local s = conv(pinfo)
  if s.server == nil then s.server = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  return s.server
end

function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "NoxVR"
  local isClient = pinfo.dst_port == server_port(pinfo)
  local udp = pinfo.port_type == 3
  local off, n = 0, tvb:len()
  while off < n do
    if n - off < 2 then
      if udp then return n end
      pinfo.desegment_offset = off
      pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
      return n
    end
    local l = tvb(off, 2):uint()
    if l < 5 or off + l > n then
      if udp then
        -- A first Handshake may be padded with zeros up to the size of its reply.
        local e = padded_handshake_end(tvb)
        if e > 0 and off <= e then
          if off == 0 then packet(tvb, 0, e, pinfo, tree, isClient, 0) end
        else
          tree:add_expert_info(PI_MALFORMED, PI_ERROR, "bad NoxVR length")
        end
        return n
      end
      if l < 5 then tree:add_expert_info(PI_MALFORMED, PI_ERROR, "bad NoxVR length"); return n end
      pinfo.desegment_offset = off
      pinfo.desegment_len = off + l - n
      return n
    end
    packet(tvb, off, off + l, pinfo, tree, isClient, 0)
    off = off + l
  end
  return n
end

DissectorTable.get("tcp.port"):add(23032, P)
DissectorTable.get("udp.port"):add(23032, P)

-- Heuristic: a Handshake (type 1) whose length fits the payload, sent by the client.
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 9 then return false end
  local l = tvb(0, 2):uint()
  if l < 9 or l > tvb:len() or tvb(4, 1):uint() ~= 1 or tvb(5, 2):uint() ~= 1 then return false end
  local s = conv(pinfo)
  s.server = pinfo.dst_port
  pinfo.conversation = P
  P.dissector(tvb, pinfo, tree)
  return true
end
P:register_heuristic("udp", heuristic)
P:register_heuristic("tcp", heuristic)
`,
};

export const inspection: ProtocolInspection = { flows: [noxFlow], dissectors: [noxDissector] };
