/**
 * The generated Wireshark dissector of RMC (`gamewire-rmc.lua`, protocol `gw_rmc`): the three
 * envelopes (HyperScape, nex-verbose, classic packed ids) from their declarations, the declared
 * methods' arguments and results by name (built-ins and `--protocols` packs), u32-framed over
 * TCP. The PRUDP dissector (prudp/dissector.ts) hands it each reassembled, decrypted message.
 */
import type { DissectorDeclaration, SchemaItem } from '../../core/flow.js';
import type { Codec } from '../../wire/codec.js';
import {
  ClassicFailureBody,
  ClassicRequestBody,
  HyperscapeFailureBody,
  NexFailureBody,
  type RmcVariant,
  VerboseRequestBody,
  VerboseSuccessBody,
} from './messages.js';
import { BUILTIN_PROTOCOLS } from './protocols/index.js';
import type { ProtocolDef } from './signature.js';

/** Order of the `variant` preference's values (1-based in Lua). */
const VARIANTS: readonly RmcVariant[] = ['hyperscape', 'nex-verbose', 'classic'];

/**
 * A Lua string literal of any text: every byte outside printable ASCII, and the quote and
 * backslash, as a decimal escape (Lua 5.2 has no `\u{…}`), so no input can end the literal.
 */
export function luaLiteral(s: string | Uint8Array): string {
  const b = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
  let out = '"';
  for (const c of b)
    out +=
      c >= 0x20 && c < 0x7f && c !== 0x22 && c !== 0x5c
        ? String.fromCharCode(c)
        : `\\${String(c).padStart(3, '0')}`;
  return `${out}"`;
}

/** Arguments and results of every declared method (packs', then the built-ins'), by `Protocol::method`. */
function methodTable(protocols: readonly ProtocolDef<any>[]): SchemaItem {
  const rows: (readonly [string, SchemaItem])[] = [];
  for (const p of protocols as any[]) {
    for (const [short, m] of p.byName as Map<string, any>) {
      const node = (codec: Codec<unknown> | undefined, what: string): SchemaItem | undefined =>
        codec === undefined
          ? undefined
          : { node: codec, path: `${p.name}.${short}.${what}`, label: what, depth: 1 };
      rows.push([
        `${p.name}::${short}`,
        {
          table: [
            ['args', node(m.args, 'args')],
            ['results', node(m.results, 'results')],
          ],
        },
      ]);
    }
  }
  return { table: rows };
}

const protocolField = (what: string): SchemaItem => ({
  field: { path: `${what}.protocol`, label: 'protocol', type: 'string', display: 'base.UNICODE' },
});

/**
 * Classic ids as names: `[protocol id] = { name = …, methods = { [method id] = "Protocol::method" } }`,
 * the first protocol with an id winning (packs before the built-ins, as `findMethodById` looks).
 */
function classicIds(protocols: readonly ProtocolDef<any>[]): string {
  const rows: string[] = [];
  const seen = new Set<number>();
  for (const p of protocols) {
    if (p.id === undefined || seen.has(p.id)) continue;
    seen.add(p.id);
    const methods = [...p.byId].map(([id, m]) => `[${id}] = ${luaLiteral(`${p.name}::${m.name}`)}`);
    rows.push(`[${p.id}] = { name = ${luaLiteral(p.name)}, methods = { ${methods.join(', ')} } }`);
  }
  return `{\n  ${rows.join(',\n  ')}\n}`;
}

/** The classic protocol id's value names (`[77] = "ArenaProtocol"`), first protocol per id. */
function protocolNames(protocols: readonly ProtocolDef<any>[]): string {
  const seen = new Set<number>();
  const names: string[] = [];
  for (const p of protocols) {
    if (p.id === undefined || seen.has(p.id)) continue;
    seen.add(p.id);
    names.push(`[${p.id}] = ${luaLiteral(p.name)}`);
  }
  return `base.DEC, { ${names.join(', ')} }`;
}

const classicField = (path: string, label: string, type: string, display?: string): SchemaItem => ({
  field: { path: `classic.${path}`, label, type, ...(display === undefined ? {} : { display }) },
});

export function rmcDissector(
  protocols: readonly ProtocolDef<any>[] = BUILTIN_PROTOCOLS,
  variant: RmcVariant = 'hyperscape',
): DissectorDeclaration {
  return {
    protocol: 'rmc',
    abbrev: 'gw_rmc',
    title: 'gamewire Rendez-Vous RMC',
    description:
      'RMC over TCP (u32 frames) and inside PRUDP (gamewire-prudp.lua); envelope: the "variant" preference.',
    schema: [
      ['REQUEST', { node: VerboseRequestBody, path: 'request', label: 'request', depth: 0 }],
      ['SUCCESS', { node: VerboseSuccessBody, path: 'response', label: 'response', depth: 0 }],
      ['FAILURE', { node: HyperscapeFailureBody, path: 'error', label: 'error', depth: 0 }],
      ['NEX_FAILURE', { node: NexFailureBody, path: 'nex.error', label: 'error', depth: 0 }],
      ['CL_REQUEST', { node: ClassicRequestBody, path: 'classic.request', label: 'request', depth: 0 }],
      ['CL_FAILURE', { node: ClassicFailureBody, path: 'classic.error', label: 'error', depth: 0 }],
      [
        'CL',
        {
          table: [
            ['protocolId', classicField('protocolId', 'protocolId', 'uint16', protocolNames(protocols))],
            ['callId', classicField('response.callId', 'callId', 'uint32')],
            ['methodId', classicField('response.methodId', 'methodId', 'uint32')],
            ['results', classicField('response.results', 'results', 'bytes', 'base.NONE')],
            [
              'name',
              { field: { path: 'hdr.method', label: 'method', type: 'string', display: 'base.UNICODE' } },
            ],
          ],
        },
      ],
      [
        'F_PROTO',
        {
          table: [
            ['request', protocolField('request')],
            ['response', protocolField('response')],
            ['error', protocolField('error')],
          ],
        },
      ],
      ['METHODS', methodTable(protocols)],
    ],
    custom: {
      'rmc.rest': {
        type: 'bytes',
        display: 'base.NONE',
        lua: 'return gw.walk({ k = "bytes", len = { t = "rest" }, f = node.f }, tvb, off, lim, tree)',
      },
      'rmc.Buffer16': {
        type: 'bytes',
        display: 'base.NONE',
        lua: 'return gw.walk({ k = "bytes", len = { t = "prefix", p = { n = 2, le = true } }, f = node.f }, tvb, off, lim, tree)',
      },
      'rmc.Buffer32': {
        type: 'bytes',
        display: 'base.NONE',
        lua: 'return gw.walk({ k = "bytes", len = { t = "prefix", p = { n = 4, le = true } }, f = node.f }, tvb, off, lim, tree)',
      },
      'rmc.UUID': {
        type: 'bytes',
        display: 'base.NONE',
        lua: 'return gw.walk({ k = "bytes", len = { t = "fixed", n = 16 }, f = node.f }, tvb, off, lim, tree)',
      },
      'rmc.qResult': {
        type: 'uint32',
        display: 'base.DEC',
        lua: 'return gw.walk({ k = "int", n = 4, le = true, signed = false, f = node.f }, tvb, off, lim, tree)',
      },
      // Pack types (protocol packs use them; the built-in methods do not): read to their end so
      // the parameters after them are named too.
      'rmc.DateTime': {
        type: 'uint64',
        display: 'base.DEC',
        lua: 'return gw.walk({ k = "i64", le = true, signed = false, f = node.f }, tvb, off, lim, tree)',
      },
      'rmc.Variant': {
        type: 'string',
        display: 'base.UNICODE',
        lua: `gw.need(tvb, off, 1, lim)
local tag = tvb(off, 1):uint()
local inner = ({
  [1] = { k = "i64", le = true, signed = true },
  [2] = { k = "float", n = 8, le = true },
  [3] = { k = "bool" },
  [4] = { k = "string", nul = true, len = { t = "prefix", p = { n = 2, le = true } } },
  [5] = { k = "i64", le = true, signed = false },
  [6] = { k = "i64", le = true, signed = false },
})[tag]
if inner == nil and tag ~= 0 then error("unknown Variant type " .. tag, 0) end
local after, v = off + 1, "none"
if inner ~= nil then after, v = gw.walk(inner, tvb, off + 1, lim, gw.NULL_TREE) end
if node.f then tree:add(node.f, gw.range(tvb, off, after - off), tostring(v)) end
return after, v`,
      },
      'rmc.AnyDataHolder': {
        type: 'string',
        display: 'base.UNICODE',
        second: 'bytes',
        lua: `local at, name = gw.walk({ k = "string", nul = true, len = { t = "prefix", p = { n = 2, le = true } }, f = node.f }, tvb, off, lim, tree)
gw.need(tvb, at, 8, lim)
local n = tvb(at + 4, 4):le_uint()
if tvb(at, 4):le_uint() ~= n + 4 then error("AnyDataHolder lengths disagree", 0) end
gw.need(tvb, at + 8, n, lim)
if node.f2 then tree:add(node.f2, gw.range(tvb, at + 8, n)) end
return at + 8 + n, { typeName = name, data = gw.hex(tvb, at + 8, n) }`,
      },
      'rmc.StationURL': {
        type: 'string',
        display: 'base.UNICODE',
        lua: 'return gw.walk({ k = "string", nul = true, len = { t = "prefix", p = { n = 2, le = true } }, f = node.f }, tvb, off, lim, tree)',
      },
    },
    glue: `
local QSTRING = { k = "string", nul = true, len = { t = "prefix", p = { n = 2, le = true } } }
local IDS = ${classicIds(protocols)}

P.prefs.variant = Pref.enum("RMC envelope", ${VARIANTS.indexOf(variant) + 1}, "hyperscape and nex-verbose: protocols and methods by name; classic: by number (Quazal titles such as Splinter Cell: Blacklist)", {
  { 1, "hyperscape", 1 }, { 2, "nex-verbose", 2 }, { 3, "classic", 3 } }, false)

-- The arguments or results by name when the method is declared and they fill their bytes exactly.
local function typed(node, tvb, off, stop, item, fallback)
  if node ~= nil then
    local ok, after = pcall(gw.walk, node, tvb, off, stop, gw.NULL_TREE)
    if ok and after == stop then
      gw.walk(node, tvb, off, stop, item)
      return
    end
  end
  item:add(fallback, gw.range(tvb, off, stop - off))
end

-- HyperScape and nex-verbose: protocol and method by name.
local function verbose(tvb, off, stop, item, nex)
  local p = off + 4
  local afterProto, protocol = gw.walk(QSTRING, tvb, p, stop, item)
  gw.need(tvb, afterProto, 1, stop)
  local isRequest = tvb(afterProto, 1):uint() == 1
  p = afterProto + 1
  if isRequest then
    item:add(F_MSG, tvb(afterProto, 1), "request")
    item:add(F_PROTO.request, gw.range(tvb, off + 4, afterProto - off - 4), protocol)
    -- callId, method, classVersions, then the arguments (everything left).
    local fields = REQUEST.fields
    local obj = {}
    for i = 1, 3 do p, obj[fields[i].name] = gw.walk(fields[i].node, tvb, p, stop, item) end
    local m = METHODS[obj.method]
    typed(m and m.args, tvb, p, stop, item, fields[4].node.f)
    return "request " .. obj.method
  end
  gw.need(tvb, p, 1, stop)
  local success = tvb(p, 1):uint() == 1
  p = p + 1
  if success then
    item:add(F_MSG, tvb(afterProto, 1), "response")
    item:add(F_PROTO.response, gw.range(tvb, off + 4, afterProto - off - 4), protocol)
    local fields = SUCCESS.fields
    local obj = {}
    for i = 1, 2 do p, obj[fields[i].name] = gw.walk(fields[i].node, tvb, p, stop, item) end
    local method = obj.method
    local m = (method:sub(-1) == "*") and METHODS[method:sub(1, -2)] or nil
    typed(m and m.results, tvb, p, stop, item, fields[3].node.f)
    return "response " .. method
  end
  item:add(F_MSG, tvb(afterProto, 1), "error")
  item:add(F_PROTO.error, gw.range(tvb, off + 4, afterProto - off - 4), protocol)
  local after = gw.walk(nex and NEX_FAILURE or FAILURE, tvb, p, stop, item)
  if after ~= stop then error("trailing bytes", 0) end
  return "error " .. protocol
end

-- Classic: u8 protocol id | 0x80 on requests (0x7F: a u16 id follows), then ids, not names.
local function classic(tvb, off, stop, item)
  local p = off + 4
  gw.need(tvb, p, 1, stop)
  local b = tvb(p, 1):uint()
  local id, idLen = bit32.band(b, 0x7f), 1
  if id == 0x7f then
    gw.need(tvb, p + 1, 2, stop)
    id, idLen = tvb(p + 1, 2):le_uint(), 3
  end
  local idRange = tvb(p, idLen)
  p = p + idLen
  local proto = IDS[id]
  if bit32.band(b, 0x80) ~= 0 then
    item:add(F_MSG, idRange, "request")
    item:add_le(CL.protocolId, idRange, id)
    local fields = CL_REQUEST.fields
    local obj = {}
    for i = 1, 2 do p, obj[fields[i].name] = gw.walk(fields[i].node, tvb, p, stop, item) end
    local name = proto and proto.methods[obj.methodId]
    if name then item:add(CL.name, idRange, name) end
    local m = name and METHODS[name]
    typed(m and m.args, tvb, p, stop, item, fields[3].node.f)
    return "request " .. (name or (id .. "::" .. obj.methodId))
  end
  gw.need(tvb, p, 1, stop)
  local success = tvb(p, 1):uint() == 1
  p = p + 1
  if success then
    item:add(F_MSG, idRange, "response")
    item:add_le(CL.protocolId, idRange, id)
    gw.need(tvb, p, 8, stop)
    item:add_le(CL.callId, tvb(p, 4))
    local raw = tvb(p + 4, 4):le_uint()
    if bit32.band(raw, 0x8000) == 0 then error("response method id lacks the 0x8000 bit", 0) end
    local methodId = bit32.band(raw, 0xffff7fff)
    item:add_le(CL.methodId, tvb(p + 4, 4), methodId)
    p = p + 8
    local name = proto and proto.methods[methodId]
    if name then item:add(CL.name, idRange, name) end
    local m = name and METHODS[name]
    typed(m and m.results, tvb, p, stop, item, CL.results)
    return "response " .. (name or (id .. "::" .. methodId))
  end
  item:add(F_MSG, idRange, "error")
  item:add_le(CL.protocolId, idRange, id)
  local after = gw.walk(CL_FAILURE, tvb, p, stop, item)
  if after ~= stop then error("trailing bytes", 0) end
  return "error " .. ((proto and proto.name) or tostring(id))
end

local function frame(tvb, off, stop, pinfo, tree, dir)
  local item = tree:add(P, tvb(off, stop - off))
  item:add(F_DIR, tvb(off, 4), dir)
  local variant = P.prefs.variant
  local ok, text = pcall(function()
    if variant == 3 then return classic(tvb, off, stop, item) end
    return verbose(tvb, off, stop, item, variant == 2)
  end)
  if not ok then
    item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed RMC packet")
    return
  end
  item:append_text(": " .. text)
  pinfo.cols.info:append(" " .. text)
end

local servers = {}
function P.init() servers = {} end

function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "RMC"
  local k = gw.conv_key(pinfo)
  if servers[k] == nil then servers[k] = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  local dir = pinfo.dst_port == servers[k] and "client" or "server"
  -- Over TCP a frame may continue in the next segment; handed over whole (by PRUDP), it may not.
  local stream = pinfo.port_type == 2
  local off, n = 0, tvb:len()
  while off < n do
    local size = n - off >= 4 and tvb(off, 4):le_uint() or nil
    if size == nil or off + 4 + size > n then
      if not stream then
        tree:add(P, tvb(off, n - off)):add_expert_info(PI_MALFORMED, PI_ERROR, "RMC frame cut short")
        return n
      end
      pinfo.desegment_offset = off
      pinfo.desegment_len = size == nil and DESEGMENT_ONE_MORE_SEGMENT or off + 4 + size - n
      return n
    end
    frame(tvb, off, off + 4 + size, pinfo, tree, dir)
    off = off + 4 + size
  end
  return n
end

DissectorTable.get("tcp.port"):add(9103, P)
`,
  };
}
