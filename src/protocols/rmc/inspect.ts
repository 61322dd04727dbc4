/**
 * RMC over TCP in the inspector and in Wireshark: u32le-framed packets decoded with the `rmc`
 * codec (named arguments and results for the declared methods). PRUDP, the UDP transport, is in
 * prudp/inspect.ts.
 */
import {
  type DecoderFlag,
  type DissectorDeclaration,
  type FlowProtocol,
  framedStreams,
  noDatagrams,
  type ProtocolInspection,
  type SchemaItem,
} from '../../core/flow.js';
import type { Codec } from '../../wire/codec.js';
import { lengthPrefixed } from '../../wire/framing.js';
import { decodeStream } from './codec.js';
import { loadPacks } from './ddl/pack.js';
import {
  HyperscapeFailureBody,
  type RmcVariant,
  VerboseRequestBody,
  VerboseSuccessBody,
} from './messages.js';
import { BUILTIN_PROTOCOLS } from './protocols/index.js';
import { PRUDP_INSPECT_FLAGS, prudpFlow } from './prudp/inspect.js';
import type { ProtocolDef } from './signature.js';

export interface RmcInspectOptions {
  /** RMC envelope variant. */
  rmcVariant: RmcVariant;
  /** The declared protocols (`--protocols` packs first, then the built-ins): named args and results. */
  rmcProtocols: readonly ProtocolDef<any>[];
}

const RMC_VARIANTS: readonly RmcVariant[] = ['hyperscape', 'nex-verbose', 'classic'];

/** `--rmc-variant` of `gamewire inspect` and `gamewire replay`: the envelope of RMC and PRUDP flows. */
export const RMC_VARIANT_FLAG: DecoderFlag = {
  flag: '--rmc-variant <variant>',
  description: 'RMC envelope: hyperscape, nex-verbose or classic',
  default: 'hyperscape',
  choices: RMC_VARIANTS,
  apply: (value) => ({ rmcVariant: value as RmcVariant }),
};

/**
 * `--protocols` of `gamewire inspect`, `gamewire replay` and `gamewire dissector`: protocol packs
 * (`gamewire rmc ddl import`) whose methods RMC and PRUDP flows show with named, typed arguments
 * and results, and the generated RMC dissector names. Comma-separated or repeated; a pack that
 * does not load stops the command (ERR_RMC_PACK).
 */
export const RMC_PACKS_FLAG: DecoderFlag = {
  flag: '--protocols <files>',
  description:
    'rmc, prudp: protocol packs (gamewire rmc ddl import), comma-separated or repeated: named args and results',
  repeatable: true,
  apply: (value) =>
    typeof value === 'string' && value !== ''
      ? { rmcProtocols: [...loadPacks(value), ...BUILTIN_PROTOCOLS] }
      : {},
};

export const rmcFlow: FlowProtocol<RmcInspectOptions> = {
  name: 'rmc',
  tcpPorts: [9103],
  udpPorts: [],
  defaults: { rmcVariant: 'hyperscape', rmcProtocols: BUILTIN_PROTOCOLS },
  create(out, options) {
    const measure = lengthPrefixed({
      prefix: 'u32le',
      counts: 'rest',
      maxFrameBytes: options.maxFrameBytes,
      minFrameBytes: options.rmcVariant === 'classic' ? 6 : 7,
    });
    return {
      ...framedStreams(out, measure, options.maxFrameBytes, (d, frame) => {
        for (const m of decodeStream(frame, options.rmcVariant, options.rmcProtocols)) out.message(d, m);
      }),
      datagram: noDatagrams(out, 'RMC over TCP'),
    };
  },
  detect: (tr, b) =>
    tr === 'tcp' &&
    b.length >= 11 &&
    b.readUInt32LE(0) + 4 <= b.length &&
    b.readUInt32LE(0) >= 7 &&
    (b[4]! & 0x80) !== 0
      ? 'client'
      : undefined,
  // What the server makes up per connection or per run (docs/inspect.md, "Recording and replay"):
  // RegisterEx's connection id (a counter) and public URL (the client's own address and port),
  // and the Kerberos tickets, sealed with fresh session keys every time.
  replay: { consistent: ['pidConnectionID', 'urlPublic'], ignore: ['pbufResponse'] },
};

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

export function rmcDissector(
  protocols: readonly ProtocolDef<any>[] = BUILTIN_PROTOCOLS,
): DissectorDeclaration {
  return {
    protocol: 'rmc',
    abbrev: 'gw_rmc',
    title: 'gamewire Rendez-Vous RMC',
    description: 'RMC over TCP (HyperScape envelope).',
    schema: [
      ['REQUEST', { node: VerboseRequestBody, path: 'request', label: 'request', depth: 0 }],
      ['SUCCESS', { node: VerboseSuccessBody, path: 'response', label: 'response', depth: 0 }],
      ['FAILURE', { node: HyperscapeFailureBody, path: 'error', label: 'error', depth: 0 }],
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

local function frame(tvb, off, stop, pinfo, tree, dir)
  local item = tree:add(P, tvb(off, stop - off))
  item:add(F_DIR, tvb(off, 4), dir)
  local ok, err = pcall(function()
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
      item:append_text(": request " .. obj.method)
    else
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
        item:append_text(": response " .. method)
      else
        item:add(F_MSG, tvb(afterProto, 1), "error")
        item:add(F_PROTO.error, gw.range(tvb, off + 4, afterProto - off - 4), protocol)
        gw.walk(FAILURE, tvb, p, stop, item)
        item:append_text(": error")
      end
    end
  end)
  if not ok then item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed RMC packet") end
end

local servers = {}
function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "RMC"
  local k = gw.conv_key(pinfo)
  if servers[k] == nil then servers[k] = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  local dir = pinfo.dst_port == servers[k] and "client" or "server"
  local off, n = 0, tvb:len()
  while off < n do
    if n - off < 4 then pinfo.desegment_offset = off; pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT; return n end
    local size = tvb(off, 4):le_uint()
    if off + 4 + size > n then pinfo.desegment_offset = off; pinfo.desegment_len = off + 4 + size - n; return n end
    frame(tvb, off, off + 4 + size, pinfo, tree, dir)
    off = off + 4 + size
  end
  return n
end

DissectorTable.get("tcp.port"):add(9103, P)
`,
  };
}

export const inspection: ProtocolInspection = {
  flows: [rmcFlow, prudpFlow],
  inspectFlags: [RMC_VARIANT_FLAG, RMC_PACKS_FLAG, ...PRUDP_INSPECT_FLAGS],
  replayFlags: [RMC_VARIANT_FLAG, RMC_PACKS_FLAG],
  dissectorFlags: [RMC_PACKS_FLAG],
  get dissectors() {
    return [rmcDissector()];
  },
  dissectorsWith: (options) => [
    rmcDissector((options.rmcProtocols as readonly ProtocolDef<any>[] | undefined) ?? BUILTIN_PROTOCOLS),
  ],
};
