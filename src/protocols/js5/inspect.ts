/**
 * JS5 in the inspector and in Wireshark: the client's handshake (5 bytes, or 21 with the OSRS
 * seed) then 4-byte requests; downstream the handshake reply then framed responses (0xFF block
 * markers every 512 bytes), XORed with the key of the last rekey request seen before the bytes.
 */
import {
  type BaseDecoderOptions,
  type DecoderFlag,
  type DissectorDeclaration,
  type Emitter,
  type FlowDecoder,
  type FlowProtocol,
  FramedDirection,
  noDatagrams,
  type ProtocolInspection,
  perDirection,
} from '../../core/flow.js';
import { decode, type Json } from '../../wire/codec.js';
import { fixedFrames } from '../../wire/framing.js';
import { responseMeasure, xorInPlace } from './framing.js';
import {
  Handshake,
  HandshakeReply,
  HandshakeSeeded,
  INIT_JS5_OPCODE,
  Js5Request,
  Js5Response,
} from './messages.js';

export interface Js5InspectOptions {
  /** JS5 handshakes carry the 16-byte seed (OSRS ≥ 223). */
  js5Seeded: boolean;
}

function js5Decoder(out: Emitter, options: BaseDecoderOptions & Js5InspectOptions): FlowDecoder {
  let xorKey = 0;
  let sawHandshake = false;
  let replyPending = false;
  const requests = fixedFrames(4);
  const response = responseMeasure(options.maxFrameBytes);
  const handshakeLength = options.js5Seeded ? 21 : 5;
  const dirs = perDirection((d) =>
    d === 'client'
      ? new FramedDirection(
          d,
          out,
          (buf, off, avail) => {
            if (avail < 1) return -1;
            return buf[off] === INIT_JS5_OPCODE && !sawHandshake ? handshakeLength : 4;
          },
          options.maxFrameBytes,
          (frame) => {
            if (!sawHandshake && frame[0] === INIT_JS5_OPCODE && frame.length === handshakeLength) {
              sawHandshake = true;
              replyPending = true;
              dirs.client.setMeasure(requests);
              const hs = options.js5Seeded ? HandshakeSeeded : Handshake;
              out.message('client', hs.toJson(decode(hs as never, frame)) as Json);
              return;
            }
            sawHandshake = true;
            const req = decode(Js5Request, frame);
            if (req.type === 'rekey') xorKey = req.key;
            out.message('client', Js5Request.toJson(req));
          },
        )
      : new FramedDirection(
          d,
          out,
          (buf, off, avail) => (replyPending ? (avail < 1 ? -1 : 1) : response(buf, off, avail)),
          options.maxFrameBytes,
          (frame) => {
            if (replyPending) {
              replyPending = false;
              out.message('server', HandshakeReply.toJson(decode(HandshakeReply, frame)));
              return;
            }
            out.message('server', Js5Response.toJson(decode(Js5Response, frame)));
          },
        ),
  );
  return {
    stream(d, bytes) {
      if (d === 'server' && xorKey !== 0) {
        // Every downstream byte after a rekey is XORed (markers and headers too); work on a copy.
        const copy = Buffer.from(bytes);
        xorInPlace(copy, xorKey);
        dirs.server.push(copy);
      } else dirs[d].push(bytes);
    },
    datagram: noDatagrams(out, 'JS5'),
    gap(d, offset, length) {
      dirs[d].gap(offset, length);
    },
  };
}

export const js5Flow: FlowProtocol<Js5InspectOptions> = {
  name: 'js5',
  tcpPorts: [43594],
  udpPorts: [],
  defaults: { js5Seeded: false },
  create: js5Decoder,
  detect: (tr, b) =>
    tr === 'tcp' &&
    b[0] === INIT_JS5_OPCODE &&
    (b.length === 5 || b.length === 21 || (b.length - 5) % 4 === 0)
      ? 'client'
      : undefined,
};

const responseField = (name: string, type: string, display: string, doc?: string) =>
  ({
    field: { path: `response.${name}`, label: name, type, display, ...(doc === undefined ? {} : { doc }) },
  }) as const;

/** The dissector: requests from the declarations; the response framing (markers, XOR) in Lua. */
export const js5Dissector: DissectorDeclaration = {
  protocol: 'js5',
  abbrev: 'gw_js5',
  title: 'gamewire JS5',
  description: 'JS5 cache protocol over TCP.',
  schema: [
    ['HANDSHAKE', { node: Handshake, path: 'handshake', label: 'handshake', depth: 0 }],
    ['REPLY', { node: HandshakeReply, path: 'handshakeReply', label: 'handshakeReply', depth: 0 }],
    ['REQUEST', { union: Js5Request, path: '' }],
    [
      'R',
      {
        table: [
          ['archive', responseField('archive', 'uint8', 'base.DEC')],
          ['group', responseField('group', 'uint16', 'base.DEC')],
          [
            'prefetch',
            responseField(
              'prefetch',
              'uint8',
              'base.DEC, { [0] = "false", [1] = "true" }',
              '0x80 bit of the compression byte',
            ),
          ],
          [
            'compression',
            responseField(
              'compression',
              'uint8',
              'base.DEC, { [0] = "none", [1] = "bzip2", [2] = "gzip", [3] = "lzma" }',
            ),
          ],
          [
            'length',
            { field: { path: 'response.hdr.length', label: 'length', type: 'int32', display: 'base.DEC' } },
          ],
          ['uncompressedLength', responseField('uncompressedLength', 'int32', 'base.DEC')],
          ['data', responseField('data', 'bytes', 'base.NONE', 'container data, still compressed')],
          ['xor', { field: { path: 'hdr.xor', label: 'xor key', type: 'uint8', display: 'base.DEC' } }],
        ],
      },
    ],
  ],
  glue: `
local state = {}
-- The XOR key and handshake state in force at the start of each frame (frames can be revisited).
local at_frame = {}

local function conv(pinfo)
  local k = gw.conv_key(pinfo)
  local s = state[k]
  if s == nil then s = { key = 0, sawHandshake = false, replyPending = false, server = nil }; state[k] = s end
  return s
end

local function client_side(tvb, pinfo, tree, s)
  local off, n = 0, tvb:len()
  while off < n do
    if not s.sawHandshake and tvb(off, 1):uint() == 15 then
      if n - off < 5 then pinfo.desegment_offset = off; pinfo.desegment_len = 5 - (n - off); return n end
      s.sawHandshake = true
      s.replyPending = true
      local item = tree:add(P, tvb(off, 5))
      item:add(F_MSG, tvb(off, 1), "handshake")
      item:add(F_DIR, tvb(off, 1), "client")
      pcall(gw.walk, HANDSHAKE, tvb, off, off + 5, item)
      item:append_text(": handshake")
      off = off + 5
    else
      s.sawHandshake = true
      if n - off < 4 then pinfo.desegment_offset = off; pinfo.desegment_len = 4 - (n - off); return n end
      local item = tree:add(P, tvb(off, 4))
      local name = REQUEST.names[tvb(off, 1):uint()] or "unknown"
      item:add(F_MSG, tvb(off, 1), name)
      item:add(F_DIR, tvb(off, 1), "client")
      item:append_text(": " .. name)
      local ok = pcall(gw.walk, REQUEST, tvb, off, off + 4, item)
      if not ok then item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed request") end
      if name == "rekey" then s.key = tvb(off + 1, 1):uint() end
      off = off + 4
    end
  end
  return n
end

local function framed_length(container)
  local total = 3 + container
  if total <= 512 then return total end
  return total + math.ceil((total - 512) / 511)
end

local function server_side(tvb, pinfo, tree, s, key)
  if key ~= 0 then
    local ba = tvb():bytes()
    for i = 0, ba:len() - 1 do ba:set_index(i, bit32.bxor(ba:get_index(i), key)) end
    tvb = ba:tvb("JS5 (XOR " .. key .. " removed)")
  end
  local off, n = 0, tvb:len()
  while off < n do
    if s.replyPending then
      s.replyPending = false
      local item = tree:add(P, tvb(off, 1))
      item:add(F_MSG, tvb(off, 1), "handshakeReply")
      item:add(F_DIR, tvb(off, 1), "server")
      pcall(gw.walk, REPLY, tvb, off, off + 1, item)
      item:append_text(": handshakeReply")
      off = off + 1
    else
      if n - off < 8 then pinfo.desegment_offset = off; pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT; return n end
      local ctype = tvb(off + 3, 1):uint()
      local c = bit32.band(ctype, 0x7f)
      local length = tvb(off + 4, 4):int()
      if c > 3 or length < 0 then tree:add_expert_info(PI_MALFORMED, PI_ERROR, "bad JS5 response header"); return n end
      local framed = framed_length(length + (c == 0 and 5 or 9))
      if n - off < framed then pinfo.desegment_offset = off; pinfo.desegment_len = framed - (n - off); return n end
      -- Remove the 0xFF marker at every response offset that is a positive multiple of 512.
      local plain = ByteArray.new()
      local first = math.min(512, framed)
      plain:append(tvb(off, first):bytes())
      local i = first
      while i < framed do
        if tvb(off + i, 1):uint() ~= 0xff then tree:add_expert_info(PI_MALFORMED, PI_ERROR, "missing 0xFF block marker"); return n end
        i = i + 1
        local take = math.min(511, framed - i)
        if take > 0 then plain:append(tvb(off + i, take):bytes()) end
        i = i + take
      end
      local t = plain:tvb("JS5 response (markers removed)")
      local item = tree:add(P, tvb(off, framed))
      item:add(F_MSG, tvb(off, 1), "response")
      item:add(F_DIR, tvb(off, 1), "server")
      if key ~= 0 then item:add(R.xor, tvb(off, 1), key) end
      item:add(R.archive, t(0, 1))
      item:add(R.group, t(1, 2))
      item:add(R.prefetch, t(3, 1), bit32.rshift(ctype, 7))
      item:add(R.compression, t(3, 1), c)
      item:add(R.length, t(4, 4))
      local h = 8
      if c ~= 0 then item:add(R.uncompressedLength, t(8, 4)); h = 12 end
      item:add(R.data, gw.range(t, h, t:len() - h))
      item:append_text(": response " .. t(0, 1):uint() .. "/" .. t(1, 2):uint())
      off = off + framed
    end
  end
  return n
end

function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "JS5"
  local s = conv(pinfo)
  if s.server == nil then s.server = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  local key = at_frame[pinfo.number]
  if key == nil then key = s.key; at_frame[pinfo.number] = key end
  if pinfo.dst_port == s.server then return client_side(tvb, pinfo, tree, s) end
  return server_side(tvb, pinfo, tree, s, key)
end

DissectorTable.get("tcp.port"):add(43594, P)

local function heuristic(tvb, pinfo, tree)
  local n = tvb:len()
  if n < 5 or tvb(0, 1):uint() ~= 15 or (n ~= 5 and (n - 5) % 4 ~= 0) then return false end
  local s = conv(pinfo)
  s.server = pinfo.dst_port
  pinfo.conversation = P
  P.dissector(tvb, pinfo, tree)
  return true
end
P:register_heuristic("tcp", heuristic)
`,
};

/** `--js5-seeded` of `gamewire inspect`. */
export const JS5_INSPECT_FLAGS: readonly DecoderFlag[] = [
  {
    flag: '--js5-seeded',
    description: 'JS5 handshakes carry the 16-byte seed (OSRS 223 and later)',
    apply: (value) => ({ js5Seeded: value === true }),
  },
];

export const inspection: ProtocolInspection = {
  flows: [js5Flow],
  dissectors: [js5Dissector],
  inspectFlags: JS5_INSPECT_FLAGS,
};
