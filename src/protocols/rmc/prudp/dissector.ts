/**
 * The generated Wireshark dissector of PRUDP V0 (`gamewire-prudp.lua`, protocol `gw_prudp`), the
 * inspector's PRUDP flow (inspect.ts) in Lua: every packet of a datagram (header fields, type and
 * flags, checksum checked with the access key), DATA payloads on the Rendez-Vous streams decrypted
 * with RC4 (restarted per packet) and inflated, fragments joined per connection and direction in
 * capture order, retransmissions shown once, and each whole RMC message handed to `gw_rmc`
 * (gamewire-rmc.lua, the same Lua the RMC-over-TCP flow uses).
 *
 * Everything the user gives (access key, RC4 key) and every name reaches the Lua as an escaped
 * string literal: the Lua is written from data only. The keys are also Wireshark preferences
 * (`gw_prudp.access_key`, `gw_prudp.rc4_key`, `gw_prudp.checksum`), whose defaults are the
 * generator's flags.
 */
import type { DissectorDeclaration, SchemaItem } from '../../../core/flow.js';
import type { CodecInfo } from '../../../wire/codec.js';
import { luaLiteral } from '../dissector.js';
import { CLASSIC_RC4_KEY, FLAG_NAMES, PACKET_TYPE_NAMES, StreamType } from './constants.js';
import { PrudpHeader } from './packet.js';

/** The options the PRUDP dissector reads (`gamewire dissector` flags). */
export interface PrudpDissectorOptions {
  /** Default of the access-key preference (checksums); none: checksums are shown, not checked. */
  prudpAccessKey?: string;
  /** Default of the checksum-width preference. */
  prudpChecksum?: 1 | 4;
  /** Default of the RC4-key preference (classic DATA payloads). */
  prudpRc4Key?: string;
}

/** The header fields' documentation, from the declaration. */
function docs(): Record<string, string | undefined> {
  const info = PrudpHeader.info as Extract<CodecInfo, { kind: 'struct' }>;
  return Object.fromEntries(info.fields.map((f) => [f.name, f.doc]));
}

function names(entries: readonly (readonly [number, string])[]): string {
  return `{ ${entries.map(([v, n]) => `[${v}] = ${luaLiteral(n)}`).join(', ')} }`;
}

export function prudpDissector(
  udpPorts: readonly number[],
  o: PrudpDissectorOptions = {},
): DissectorDeclaration {
  const d = docs();
  const typeNames = names(PACKET_TYPE_NAMES.map((n, i) => [i, n] as const));
  const streamNames = names(Object.entries(StreamType).map(([n, v]) => [v, n] as const));
  const field = (path: string, type: string, display?: string, doc?: string): SchemaItem => ({
    field: {
      path,
      label: path.replace(/^hdr\./, ''),
      type,
      ...(display === undefined ? {} : { display }),
      ...(doc === undefined ? {} : { doc }),
    },
  });
  const dec = 'base.DEC';
  const hex = 'base.HEX';
  const bool = 'base.DEC, { [0] = "false", [1] = "true" }';
  const rows: [string, SchemaItem][] = [
    ['source', field('source', 'uint8', dec, d.source)],
    ['destination', field('destination', 'uint8', dec, d.destination)],
    [
      'stream',
      field('hdr.stream', 'uint8', `base.DEC, ${streamNames}`, 'stream type: the high nibble of a vport'),
    ],
    ['port', field('hdr.port', 'uint8', dec, 'port: the low nibble of a vport')],
    ['typeFlags', field('hdr.typeFlags', 'uint8', hex, d.typeFlags)],
    ['type', field('hdr.type', 'uint8', `base.DEC, ${typeNames}`, 'packet type')],
    ['flags', field('flags', 'string', 'base.UNICODE', 'a flag set in type_flags')],
    ['sessionId', field('sessionId', 'uint8', dec, d.sessionId)],
    ['packetSignature', field('packetSignature', 'uint32', dec, d.packetSignature)],
    ['sequenceId', field('sequenceId', 'uint16', dec, d.sequenceId)],
    ['connectionSignature', field('connectionSignature', 'uint32', dec, d.connectionSignature)],
    ['fragmentId', field('fragmentId', 'uint8', dec, 'DATA: 1, 2, … and 0 for the last (or only) fragment')],
    ['payloadSize', field('hdr.payloadSize', 'uint16', dec, 'payload size (HAS_SIZE only)')],
    ['payloadLength', field('payloadLength', 'uint32', dec, 'payload bytes on the wire')],
    ['payload', field('hdr.payload', 'bytes', 'base.NONE', 'the payload as sent (encrypted)')],
    ['checksum', field('hdr.checksum', 'uint32', hex, 'checksum over the packet before it')],
    ['checksumGood', field('hdr.checksum_good', 'uint8', bool, 'the checksum matches the access key')],
    [
      'keyByte',
      field('hdr.key_byte', 'uint8', hex, "no access key given: the key's byte sum, learned from the SYN"),
    ],
    ['compression', field('compression', 'uint8', dec, '0: stored; else the zlib ratio byte')],
    ['plaintext', field('hdr.plaintext', 'bytes', 'base.NONE', 'the payload decrypted and inflated')],
    ['retransmission', field('retransmission', 'uint8', bool, 'a sequence id seen before')],
    ['rmcBytes', field('rmcBytes', 'uint32', dec, 'size of the whole RMC message (fragments joined)')],
    ['fragments', field('hdr.fragments', 'uint32', dec, 'DATA packets joined into this RMC message')],
    ['errorCode', field('payloadError.code', 'string', 'base.UNICODE', 'why the payload does not decode')],
  ];
  const checksumIndex = o.prudpChecksum === 4 ? 2 : 1;
  return {
    protocol: 'prudp',
    abbrev: 'gw_prudp',
    title: 'gamewire PRUDP V0 (Quazal Rendez-Vous)',
    description: 'PRUDP V0 over UDP, RC4 DATA payloads, RMC inside (needs gamewire-rmc.lua).',
    schema: [['H', { table: rows }]],
    glue: `
local TYPE_NAMES = ${typeNames}
local FLAGS = { ${FLAG_NAMES.map(([n, bit]) => `{ ${luaLiteral(n)}, ${bit} }`).join(', ')} }
-- Streams whose checksum counts the access key and whose DATA payloads are RC4.
local CODED = { [${StreamType.OLD_RV_SECURE}] = true, [${StreamType.RV_SECURE}] = true }
local CONNECT, DATA, ACK, HAS_SIZE = 1, 2, 0x08, 0x40
-- Bytes of one message being joined, and sequence ids remembered per connection and direction.
local MAX_MESSAGE, MAX_SEEN = 1048576, 4096

P.prefs.access_key = Pref.string("Access key", ${luaLiteral(Buffer.from(o.prudpAccessKey ?? '', 'latin1'))},
  "the game's access key: checksums are checked with it (empty: shown, not checked)")
P.prefs.checksum = Pref.enum("Checksum width", ${checksumIndex}, "checksum bytes per packet",
  { { 1, "1", 1 }, { 2, "4", 4 } }, false)
P.prefs.rc4_key = Pref.string("RC4 key", ${luaLiteral(Buffer.from(o.prudpRc4Key ?? CLASSIC_RC4_KEY, 'latin1'))},
  "RC4 key of DATA payloads, restarted for every packet (empty: payloads are not decrypted)")

local conns, results, servers, learned = {}, {}, {}, {}
function P.init() conns, results, servers, learned = {}, {}, {}, {} end

local rc4_key, rc4_init = nil, nil
local function rc4(key, data)
  if rc4_key ~= key then
    local s, j = {}, 0
    for i = 0, 255 do s[i] = i end
    for i = 0, 255 do
      j = (j + s[i] + key:byte(i % #key + 1)) % 256
      s[i], s[j] = s[j], s[i]
    end
    rc4_key, rc4_init = key, s
  end
  local s, out, i, j = {}, {}, 0, 0
  for k = 0, 255 do s[k] = rc4_init[k] end
  for n = 1, #data do
    i = (i + 1) % 256
    local si = s[i]
    j = (j + si) % 256
    local sj = s[j]
    s[i], s[j] = sj, si
    out[n] = string.char(bit32.bxor(data:byte(n), s[(si + sj) % 256]))
  end
  return table.concat(out)
end

-- The checksum of the bytes in raw (a Lua string), with the key byte kb.
local function checksum(raw, width, kb)
  local n = #raw
  local whole = n - n % 4
  local sum = 0
  for p = 1, whole, 4 do
    local a, b, c, d = raw:byte(p, p + 3)
    sum = (sum + a + b * 256 + c * 65536 + d * 16777216) % 4294967296
  end
  if width == 1 then
    local s = kb + sum % 256 + math.floor(sum / 256) % 256 + math.floor(sum / 65536) % 256 + math.floor(sum / 16777216)
    for p = whole + 1, n do s = s + raw:byte(p) end
    return s % 256
  end
  local last, m = 0, 1
  for p = whole + 1, n do last = last + raw:byte(p) * m; m = m * 256 end
  return (sum + last + kb) % 4294967296
end

local function key_byte(key)
  local s = 0
  for i = 1, #key do s = s + key:byte(i) end
  return s % 256
end

-- One packet's header at off (as readPacket reads it); returns the packet, or nil and why.
local function parse(tvb, off, n, width)
  if n - off < 10 + width then return nil, "PRUDP packet needs at least " .. (10 + width) .. " bytes" end
  local tf = tvb(off + 2, 1):uint()
  local pk = { off = off, tf = tf, type = tf % 8, source = tvb(off, 1):uint(), session = tvb(off + 3, 1):uint(),
    destination = tvb(off + 1, 1):uint(), seq = tvb(off + 8, 2):le_uint(), fragment = 0 }
  local p = off + 10
  if pk.type <= CONNECT then
    if n - p < 4 + width then return nil, "connectionSignature: 4 bytes needed" end
    pk.connAt = p
    p = p + 4
  elseif pk.type == DATA then
    if n - p < 1 + width then return nil, "fragmentId: 1 byte needed" end
    pk.fragAt = p
    pk.fragment = tvb(p, 1):uint()
    p = p + 1
  end
  local size
  if bit32.band(tf, HAS_SIZE) ~= 0 then
    if n - p < 2 + width then return nil, "payloadSize: 2 bytes needed" end
    size = tvb(p, 2):le_uint()
    pk.sizeAt = p
    p = p + 2
    if n - p < size + width then
      return nil, "payload of " .. size .. " bytes and checksum do not fit in the " .. (n - p) .. " bytes left"
    end
  else
    size = n - p - width
  end
  pk.payloadAt, pk.size, pk.sumAt = p, size, p + size
  return pk, p + size + width
end

-- Decrypts and inflates a DATA payload: the plaintext (a string), a tvb showing it (nil when
-- empty) and the compression byte; or nil, nil, the compression byte and why.
local function decode(tvb, pk, key)
  local plain = rc4(key, tvb(pk.payloadAt, pk.size):raw())
  local c = plain:byte(1)
  if c == 0 then
    if #plain == 1 then return "", nil, c end
    local t = ByteArray.new(plain:sub(2), true):tvb("PRUDP plaintext")
    return plain:sub(2), t, c
  end
  if #plain < 2 then return nil, nil, c, "payload does not inflate" end
  local t = ByteArray.new(plain, true):tvb("PRUDP decrypted")
  local u = t(1):uncompress("PRUDP inflated")
  if u == nil then return nil, nil, c, "payload does not inflate" end
  if u:len() > MAX_MESSAGE then return nil, nil, c, "payload inflates to over " .. MAX_MESSAGE .. " bytes" end
  return u:raw(), u, c
end

-- First pass only: what this DATA packet adds to its connection (retransmission, whole message).
local function reassemble(pk, dir, pinfo, body)
  local ck = dir .. ":" .. pk.source .. ":" .. pk.destination .. ":" .. pk.session .. "|" .. gw.conv_key(pinfo)
  local c = conns[ck]
  if c == nil then
    c = { seen = {}, order = {}, first = 1, parts = {}, bytes = 0 }
    conns[ck] = c
  end
  if c.seen[pk.seq] then return { retransmission = true } end
  c.seen[pk.seq] = true
  c.order[#c.order + 1] = pk.seq
  if #c.order - c.first + 1 > MAX_SEEN then
    c.seen[c.order[c.first]] = nil
    c.order[c.first] = nil
    c.first = c.first + 1
  end
  local r = {}
  if body == nil then return r end
  c.bytes = c.bytes + #body
  if c.bytes > MAX_MESSAGE then
    c.parts, c.bytes = {}, 0
    r.error = "ERR_TOO_LARGE"
    return r
  end
  c.parts[#c.parts + 1] = body
  if pk.fragment ~= 0 then return r end
  r.message, r.fragments = table.concat(c.parts), #c.parts
  c.parts, c.bytes = {}, 0
  return r
end

local function vport(item, field, tvb, at)
  local v = tvb(at, 1):uint()
  local sub = item:add(field, tvb(at, 1))
  sub:add(H.stream, tvb(at, 1), math.floor(v / 16))
  sub:add(H.port, tvb(at, 1), v % 16)
end

-- Shows one parsed packet; returns false when the datagram's remaining packets cannot be trusted.
local function packet(tvb, pinfo, tree, pk, stop, width, index, dir)
  local off = pk.off
  local item = tree:add(P, tvb(off, stop - off))
  local name = TYPE_NAMES[pk.type]
  item:add(F_MSG, tvb(off + 2, 1), name)
  item:add(F_DIR, gw.range(tvb, off, 0), dir)
  vport(item, H.source, tvb, off)
  vport(item, H.destination, tvb, off + 1)
  local tfItem = item:add(H.typeFlags, tvb(off + 2, 1))
  tfItem:add(H.type, tvb(off + 2, 1), pk.type)
  local flagNames = {}
  for _, f in ipairs(FLAGS) do
    if bit32.band(pk.tf, f[2]) ~= 0 then
      item:add(H.flags, tvb(off + 2, 1), f[1])
      flagNames[#flagNames + 1] = f[1]
    end
  end
  item:add(H.sessionId, tvb(off + 3, 1))
  item:add_le(H.packetSignature, tvb(off + 4, 4))
  item:add_le(H.sequenceId, tvb(off + 8, 2))
  if pk.connAt then item:add_le(H.connectionSignature, tvb(pk.connAt, 4)) end
  if pk.fragAt then item:add(H.fragmentId, tvb(pk.fragAt, 1)) end
  if pk.sizeAt then item:add_le(H.payloadSize, tvb(pk.sizeAt, 2)) end
  item:add(H.payloadLength, gw.range(tvb, pk.payloadAt, pk.size), pk.size)
  if pk.size > 0 then item:add(H.payload, tvb(pk.payloadAt, pk.size)) end
  local sumRange = tvb(pk.sumAt, width)
  local actual = width == 1 and sumRange:uint() or sumRange:le_uint()
  item:add(H.checksum, sumRange, actual)
  local text = name .. " seq=" .. pk.seq
  if pk.type == DATA then text = text .. " frag=" .. pk.fragment end
  if #flagNames > 0 then text = text .. " [" .. table.concat(flagNames, ",") .. "]" end
  item:append_text(": " .. text)
  if index > 1 then pinfo.cols.info:append(" |") end
  pinfo.cols.info:append(" " .. text)
  -- The key counts through one byte only: without an access key, that byte is learned from the
  -- conversation's first SYN (no payload), as the server's \`--prudp-access-key auto\` does.
  local key = P.prefs.access_key
  local coded = CODED[math.floor(pk.source / 16)]
  local raw = tvb(off, pk.sumAt - off):raw()
  local kb
  if key ~= "" then
    kb = key_byte(key)
  else
    local k = gw.conv_key(pinfo)
    if learned[k] == nil and coded and pk.type == 0 and pk.size == 0 then
      local d = (actual - checksum(raw, width, 0)) % (width == 1 and 256 or 4294967296)
      if d <= 255 then learned[k] = d end
    end
    kb = learned[k]
    if kb ~= nil then item:add(H.keyByte, sumRange, kb) end
  end
  if kb == nil then
    item:add_expert_info(PI_CHECKSUM, PI_NOTE, "checksum not checked: no access key (preference gw_prudp.access_key) and no SYN to learn its key byte from")
  else
    local expected = checksum(raw, width, coded and kb or 0)
    item:add(H.checksumGood, sumRange, expected == actual and 1 or 0)
    if expected ~= actual then
      local digits = "%0" .. (width * 2) .. "x"
      item:add_expert_info(PI_CHECKSUM, PI_ERROR, string.format("bad checksum: expected 0x" .. digits .. ", got 0x" .. digits, expected, actual))
      return false
    end
  end
  -- DATA on a Rendez-Vous stream: decrypt, inflate, join, then RMC. ACKs carry no data.
  if pk.type ~= DATA or pk.size == 0 or bit32.band(pk.tf, ACK) ~= 0 or not CODED[math.floor(pk.source / 16)] then
    return true
  end
  local rc4key = P.prefs.rc4_key
  local body, shown, compression, err
  local payload = tvb(pk.payloadAt, pk.size)
  local frame = results[pinfo.number]
  if frame == nil then
    frame = {}
    results[pinfo.number] = frame
  end
  local r = frame[index]
  if r == nil or not pinfo.visited then
    -- A retransmission is not decoded (as the inspector); a first copy is.
    local ck = dir .. ":" .. pk.source .. ":" .. pk.destination .. ":" .. pk.session .. "|" .. gw.conv_key(pinfo)
    local c = conns[ck]
    if c ~= nil and c.seen[pk.seq] then
      r = { retransmission = true }
    else
      if rc4key ~= "" then body, shown, compression, err = decode(tvb, pk, rc4key) end
      r = reassemble(pk, dir, pinfo, body)
      if rc4key == "" then r.error = "no RC4 key"
      elseif body == nil then r.error = "ERR_PRUDP_BAD_PAYLOAD"; r.why = err end
    end
    frame[index] = r
  elseif not r.retransmission and rc4key ~= "" then
    body, shown, compression, err = decode(tvb, pk, rc4key)
  end
  if r.retransmission then
    item:add(H.retransmission, payload, 1)
    item:append_text(" (retransmission)")
    return true
  end
  if r.error ~= nil then
    if r.error ~= "no RC4 key" then item:add(H.errorCode, payload, r.error) end
    item:add_expert_info(PI_UNDECODED, PI_WARN, "payload not decoded: " .. (r.why or r.error))
    return true
  end
  if compression ~= nil then item:add(H.compression, tvb(pk.payloadAt, 1), compression) end
  if shown ~= nil then item:add(H.plaintext, shown()) end
  if r.message == nil then return true end
  local whole = ByteArray.new(r.message, true):tvb("RMC message")
  item:add(H.rmcBytes, whole(), whole:len())
  item:add(H.fragments, whole(), r.fragments)
  local ok, rmc = pcall(Dissector.get, "gw_rmc")
  if not ok or rmc == nil then
    item:add_expert_info(PI_UNDECODED, PI_WARN, "load gamewire-rmc.lua too: it decodes the RMC message")
    return true
  end
  local called, why = pcall(function() rmc:call(whole, pinfo, tree) end)
  if not called then item:add_expert_info(PI_MALFORMED, PI_ERROR, "RMC: " .. tostring(why)) end
  return true
end

function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "PRUDP"
  pinfo.cols.info:clear()
  local k = gw.conv_key(pinfo)
  if servers[k] == nil then servers[k] = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  local dir = pinfo.dst_port == servers[k] and "client" or "server"
  local width = P.prefs.checksum
  local n = tvb:len()
  local off, index = 0, 0
  while off < n do
    index = index + 1
    local ok, pk, after = pcall(parse, tvb, off, n, width)
    if not ok or pk == nil then
      tree:add(P, tvb(off, n - off)):add_expert_info(PI_MALFORMED, PI_ERROR, tostring(after or pk))
      return n
    end
    local shown, more = pcall(packet, tvb, pinfo, tree, pk, after, width, index, dir)
    if not shown then
      tree:add(P, tvb(off, after - off)):add_expert_info(PI_MALFORMED, PI_ERROR, "malformed PRUDP packet: " .. tostring(more))
      return n
    end
    if not more then return n end
    off = after
  end
  return n
end

${udpPorts.map((p) => `DissectorTable.get("udp.port"):add(${p}, P)`).join('\n')}
`,
  };
}
