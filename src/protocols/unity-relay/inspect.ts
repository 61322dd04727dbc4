/**
 * Unity Relay in the inspector and in Wireshark: one or more relay messages per UDP datagram
 * (RELAY payloads as hex); DTLS datagrams (the relay's DTLS endpoint) as record headers; over
 * TCP, the relay's WebSocket endpoint, each binary message decoded like a datagram.
 */
import type {
  BaseDecoderOptions,
  DissectorDeclaration,
  Emitter,
  FlowDecoder,
  FlowProtocol,
  ProtocolInspection,
} from '../../core/flow.js';
import { dtlsDecoder, looksLikeDtls, webSocketDecoder } from '../../core/flow-transports.js';
import type { Direction } from '../../core/protocol.js';
import { asDecodeError } from '../../wire/errors.js';
import { decodeAll } from './codec.js';
import { RelayFrame, RelayMessages } from './messages.js';

function relayDecoder(out: Emitter, options: BaseDecoderOptions): FlowDecoder {
  const dtls = dtlsDecoder(out);
  const messages = (d: Direction, payload: Buffer): void => {
    for (const m of decodeAll(payload)) out.message(d, RelayMessages.toJson(m));
  };
  // Over TCP, Unity Relay runs inside a WebSocket (the relay's ws endpoint).
  let ws: FlowDecoder | undefined;
  return {
    stream(d, bytes, offset) {
      ws ??= webSocketDecoder(out, options, messages);
      ws.stream(d, bytes, offset);
    },
    datagram(d, payload) {
      if (looksLikeDtls(payload)) {
        dtls.datagram(d, payload);
        return;
      }
      try {
        messages(d, payload);
      } catch (e) {
        out.error(d, asDecodeError(e, 0));
      }
    },
    gap(d, offset, length) {
      ws?.gap(d, offset, length);
    },
  };
}

export const unityRelayFlow: FlowProtocol = {
  name: 'unity-relay',
  // 37000 UDP, 37001 DTLS, 37002 WebSocket (37003, wss, is TLS: records only).
  tcpPorts: [37002],
  udpPorts: [37000, 37001],
  create: relayDecoder,
  detect: (tr, b) => {
    if (tr !== 'udp' || b.length < 4 || b[0] !== 0xda || b[1] !== 0x72 || b[2] !== 0) return undefined;
    // BIND_RECEIVED, ACCEPTED, REJECTED and ERROR come only from the relay.
    return b[3] === 1 || b[3] === 6 || b[3] === 8 || b[3] === 12 ? 'server' : 'client';
  },
};

/** The dissector: the relay frame from its declaration; datagram loop and direction in Lua. */
export const unityRelayDissector: DissectorDeclaration = {
  protocol: 'unity-relay',
  abbrev: 'gw_unity',
  title: 'gamewire Unity Relay',
  description: 'Unity Relay message protocol over UDP.',
  schema: [['FRAME', { node: RelayFrame, path: '', label: 'frame', depth: 0 }]],
  glue: `
local state = {}
local NAMES = FRAME.fields[3].node.names

function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "Unity Relay"
  local k = gw.conv_key(pinfo)
  if state[k] == nil then state[k] = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  local isClient = pinfo.dst_port == state[k]
  local off, n = 0, tvb:len()
  while off + 4 <= n and tvb(off, 2):uint() == 0xda72 do
    local name = NAMES[tvb(off + 3, 1):uint()] or "unknown"
    local item = tree:add(P, tvb(off, n - off))
    item:add(F_MSG, tvb(off + 3, 1), name)
    item:add(F_DIR, tvb(off + 3, 1), isClient and "client" or "server")
    item:append_text(": " .. name)
    local ok, after = pcall(gw.walk, FRAME, tvb, off, n, item)
    if not ok then
      item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed " .. name)
      return n
    end
    item:set_len(after - off)
    off = after
  end
  return n
end

DissectorTable.get("udp.port"):add(37000, P)

local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 4 or tvb(0, 2):uint() ~= 0xda72 or tvb(2, 1):uint() ~= 0 then return false end
  local t = tvb(3, 1):uint()
  local k = gw.conv_key(pinfo)
  -- BIND_RECEIVED, ACCEPTED, REJECTED and ERROR come only from the relay.
  if state[k] == nil then
    if t == 1 or t == 6 or t == 8 or t == 12 then state[k] = pinfo.src_port else state[k] = pinfo.dst_port end
  end
  pinfo.conversation = P
  P.dissector(tvb, pinfo, tree)
  return true
end
P:register_heuristic("udp", heuristic)
`,
};

export const inspection: ProtocolInspection = {
  flows: [unityRelayFlow],
  dissectors: [unityRelayDissector],
  // The wss endpoint (37003): TLS records only.
  tlsPorts: [37003],
};
