/**
 * `gamewire dissector`: Wireshark Lua dissectors generated from the protocols' declarations.
 *
 * Every declared message becomes a schema table (names, types, byte order, lengths, conditions,
 * value names) interpreted by a small Lua runtime (lua-runtime.ts); each protocol adds its
 * framing in a short hand-written glue: NoxVR packets over TCP (reassembled) and UDP, with
 * Reliable batches and Segmentation sessions; Unity Relay datagrams; JS5 handshake, requests
 * and framed responses (block markers removed, XOR after a rekey); RMC u32 frames with the
 * built-in methods' arguments and results by name. Field abbreviations are
 * `gw_<protocol>.<Message>.<field>[.<sub>]`, so a display filter such as
 * `gw_nox.Handshake.engine == "unity"` works.
 */

import { Handshake, HandshakeReply, Js5Request } from '../protocols/js5/messages.js';
import { clientMessages, serverMessages } from '../protocols/nox-relay/messages.js';
import { HyperscapeFailureBody, VerboseRequestBody, VerboseSuccessBody } from '../protocols/rmc/messages.js';
import { BUILTIN_PROTOCOLS } from '../protocols/rmc/protocols/index.js';
import { RelayFrame } from '../protocols/unity-relay/messages.js';
import type { Codec, CodecInfo, FieldInfo, LengthInfo } from '../wire/codec.js';
import { LUA_RUNTIME } from './lua-runtime.js';

type Condition = NonNullable<FieldInfo['condition']>;

/** One generated file. */
export interface Dissector {
  protocol: string;
  file: string;
  lua: string;
}

function luaString(s: string): string {
  return JSON.stringify(s).replace(/\\u([0-9a-fA-F]{4})/g, (_, h) => `\\u{${h}}`);
}

function luaValue(v: unknown): string {
  if (typeof v === 'string') return luaString(v);
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return String(v);
  return 'nil';
}

function join(a: string, b: string): string {
  return a === '' ? b : b === '' ? a : `${a}.${b}`;
}

function sanitize(s: string): string {
  return s.replace(/::/g, '.').replace(/[^A-Za-z0-9_.-]/g, '_');
}

/** Collects ProtoFields and writes schema tables for one protocol. */
class SchemaWriter {
  readonly fields: string[] = [];
  private readonly prefix: string;

  constructor(prefix: string) {
    this.prefix = prefix;
  }

  /**
   * Declares a ProtoField; returns the Lua expression naming it. `extra` is the display base,
   * optionally followed by a value-string table (`base.DEC, { [0] = "ok" }`).
   */
  field(path: string, label: string, ctor: string, extra = '', doc?: string): string {
    const abbrev = `${this.prefix}.${sanitize(path)}`;
    const i = this.fields.length + 1;
    const desc = doc === undefined ? 'nil' : luaString(doc);
    let args: string;
    if (/^u?int\d+$/.test(ctor)) {
      const [base, ...rest] = extra === '' ? ['base.DEC'] : extra.split(/,\s*(?=\{)/);
      const valuestring = rest.length > 0 ? rest.join(', ') : 'nil';
      args = `${base}, ${valuestring}, nil, ${desc}`;
    } else if (ctor === 'bytes' || ctor === 'string') {
      args = `${extra === '' ? 'nil' : extra}, ${desc}`;
    } else {
      args = desc;
    }
    this.fields.push(`F[${i}] = ProtoField.${ctor}(${luaString(abbrev)}, ${luaString(label)}, ${args})`);
    return `F[${i}]`;
  }

  private intCtor(bits: number, signed: boolean): string {
    return `${signed ? 'int' : 'uint'}${bits}`;
  }

  private length(l: LengthInfo): string {
    if (l.type === 'fixed') return `{ t = "fixed", n = ${l.value} }`;
    if (l.type === 'rest') return '{ t = "rest" }';
    const p = l.prefix.info as Extract<CodecInfo, { kind: 'int' }>;
    return `{ t = "prefix", p = { n = ${p.bits / 8}, le = ${p.endian === 'le'} } }`;
  }

  /** The schema node for `codec` at `path` (fields are named after the path). */
  node(codec: Codec<unknown>, path: string, label: string, doc?: string, depth = 0): string {
    const info = codec.info;
    if (depth > 12) return `{ k = "opaque", f = ${this.field(path, label, 'bytes', 'base.NONE', doc)} }`;
    switch (info.kind) {
      case 'int': {
        const f = this.field(path, label, this.intCtor(info.bits, info.signed), 'base.DEC', doc);
        return `{ k = "int", n = ${info.bits / 8}, le = ${info.endian === 'le'}, signed = ${info.signed}, f = ${f} }`;
      }
      case 'enum': {
        const base = info.base.info as Extract<CodecInfo, { kind: 'int' }>;
        const names = Object.entries(info.values)
          .map(([k, v]) => `[${v}] = ${luaString(k)}`)
          .join(', ');
        const f = this.field(
          path,
          label,
          this.intCtor(base.bits, base.signed),
          `base.DEC, { ${names} }`,
          doc,
        );
        return `{ k = "int", n = ${base.bits / 8}, le = ${base.endian === 'le'}, signed = ${base.signed}, f = ${f} }`;
      }
      case 'bigint': {
        const f = this.field(path, label, info.signed ? 'int64' : 'uint64', 'base.DEC', doc);
        return `{ k = "i64", le = ${info.endian === 'le'}, signed = ${info.signed}, f = ${f} }`;
      }
      case 'float': {
        const f = this.field(path, label, info.bits === 32 ? 'float' : 'double', '', doc);
        return `{ k = "float", n = ${info.bits / 8}, le = ${info.endian === 'le'}, f = ${f} }`;
      }
      case 'bool': {
        const f = this.field(path, label, 'uint8', 'base.DEC, { [0] = "false", [1] = "true" }', doc);
        return `{ k = "bool", f = ${f} }`;
      }
      case 'bytes': {
        const f = this.field(path, label, 'bytes', 'base.NONE', doc);
        return `{ k = "bytes", len = ${this.length(info.length)}, f = ${f} }`;
      }
      case 'string': {
        const f = this.field(path, label, 'string', 'base.UNICODE', doc);
        return `{ k = "string", len = ${this.length(info.length)}, nul = ${info.nulTerminated}, f = ${f} }`;
      }
      case 'array': {
        const f = this.field(`${path}_list`, label, 'none', '', doc);
        const el = this.node(info.element, path, label, undefined, depth + 1);
        const counts = info.length.type === 'prefix' ? info.length.counts : 'items';
        return `{ k = "array", len = ${this.length(info.length)}, counts = "${counts}", el = ${el}, f = ${f} }`;
      }
      case 'struct': {
        const f = depth === 0 ? 'nil' : this.field(`${path}_struct`, label, 'none', '', doc);
        const parts: string[] = [];
        info.fields.forEach((fi, i) => {
          const sub = join(path, fi.name);
          const node = fi.isConstant
            ? this.constantNode(fi, join(path, `hdr.${fi.name}`))
            : this.node(fi.codec, sub, fi.name, fi.doc, depth + 1);
          const cond = fi.when === undefined ? 'nil' : this.condition(fi, info.fields.slice(0, i));
          const constant = fi.isConstant ? luaValue(fi.constant) : 'nil';
          parts.push(`{ name = ${luaString(fi.name)}, node = ${node}, cond = ${cond}, const = ${constant} }`);
        });
        return `{ k = "struct", f = ${f}, fields = { ${parts.join(', ')} } }`;
      }
      case 'sized': {
        const p = info.prefix.info as Extract<CodecInfo, { kind: 'int' }>;
        const inner = this.node(info.inner, path, label, doc, depth);
        return `{ k = "sized", prefix = { n = ${p.bits / 8}, le = ${p.endian === 'le'} }, adjust = ${info.adjust}, inner = ${inner} }`;
      }
      case 'union':
        return this.union(info, path, depth);
      case 'lazy':
        return this.node(info.target(), path, label, doc, depth + 1);
      case 'custom': {
        const ctor = CUSTOM_FIELD_TYPES[info.name] ?? ['bytes', 'base.NONE'];
        const f = this.field(path, label, ctor[0], ctor[1], doc ?? info.description);
        const f2 =
          info.name === 'nox-relay.enter-threshold'
            ? `, f2 = ${this.field(`${path}_u8`, label, 'uint8', 'base.DEC')}`
            : '';
        return `{ k = "custom", name = ${luaString(info.name)}, f = ${f}${f2} }`;
      }
      default:
        return `{ k = "opaque", f = ${this.field(path, label, 'bytes', 'base.NONE', doc)} }`;
    }
  }

  private constantNode(fi: FieldInfo, path: string): string {
    // Constants (signatures, versions) are shown, under `hdr`, but are not message fields.
    return this.node(fi.codec, path, fi.name, fi.doc, 1);
  }

  /** A union: its tag (named `…hdr.tag`, with the variant names as value names) and variants. */
  union(info: Extract<CodecInfo, { kind: 'union' }>, path: string, depth: number): string {
    const tag = info.tag.info as Extract<CodecInfo, { kind: 'int' }>;
    const names = info.variants.map((v) => `[${v.tag}] = ${luaString(v.name)}`).join(', ');
    const tagField = this.field(
      join(path, 'hdr.tag'),
      'type',
      this.intCtor(tag.bits, false),
      `base.DEC, { ${names} }`,
    );
    const variants = info.variants
      .map((v) => `[${v.tag}] = ${this.node(v.codec, join(path, v.name), v.name, undefined, depth)}`)
      .join(',\n    ');
    return `{ k = "union", tag = { n = ${tag.bits / 8}, le = ${tag.endian === 'le'}, f = ${tagField} }, names = { ${names} }, variants = {\n    ${variants} } }`;
  }

  /** A field's condition as data: declared with `is.…`, or inferred from its function. */
  private condition(fi: FieldInfo, before: readonly FieldInfo[]): string {
    const c = fi.condition ?? inferCondition(fi.when!, before);
    return c === undefined ? 'false' : conditionLua(c);
  }
}

const CUSTOM_FIELD_TYPES: Record<string, [string, string]> = {
  'nox-relay.optional-string': ['string', 'base.UNICODE'],
  'nox-relay.optional-u16': ['uint16', 'base.DEC'],
  'nox-relay.enter-threshold': ['float', ''],
  'nox-relay.address-cookie': ['bytes', 'base.NONE'],
  'rmc.rest': ['bytes', 'base.NONE'],
  'rmc.Buffer16': ['bytes', 'base.NONE'],
  'rmc.Buffer32': ['bytes', 'base.NONE'],
  'rmc.UUID': ['bytes', 'base.NONE'],
  'rmc.qResult': ['uint32', 'base.DEC'],
  'rmc.StationURL': ['string', 'base.UNICODE'],
};

function conditionLua(c: Condition): string {
  const x = c as any;
  switch (x.op) {
    case 'eq':
    case 'ne':
      return `{ op = "${x.op}", field = ${luaString(x.field)}, value = ${luaValue(x.value)} }`;
    case 'in':
      return `{ op = "in", field = ${luaString(x.field)}, values = { ${x.values.map(luaValue).join(', ')} } }`;
    case 'allBits':
    case 'anyBits':
    case 'noBits':
      return `{ op = "${x.op}", field = ${luaString(x.field)}, mask = ${x.mask} }`;
    case 'and':
    case 'or':
      return `{ op = "${x.op}", conditions = { ${x.conditions.map(conditionLua).join(', ')} } }`;
    case 'not':
      return `{ op = "not", condition = ${conditionLua(x.condition)} }`;
    case 'true':
    case 'false':
      return `{ op = "${x.op}" }`;
    default:
      return 'false';
  }
}

/**
 * Recovers a `when` written as a function (`(m) => (m.flags & 4) !== 0`) as condition data, by
 * evaluating it over the values of one earlier integer field at a time. Only exact
 * single-field forms are accepted (eq, ne, anyBits, noBits, allBits), each checked against every
 * value of a byte and a sample of wider ones; anything else gives undefined (the dissector then
 * leaves the rest of that message undissected rather than guess).
 */
export function inferCondition(fn: (o: any) => boolean, before: readonly FieldInfo[]): Condition | undefined {
  const ints = before.filter((f) => !f.isConstant && ['int', 'enum', 'bool'].includes(f.codec.info.kind));
  const zero = (f: FieldInfo): number | boolean => (f.codec.info.kind === 'bool' ? false : 0);
  const base: Record<string, unknown> = {};
  for (const f of before) base[f.name] = zero(f);
  const run = (o: Record<string, unknown>): boolean => {
    try {
      return fn(o) === true;
    } catch {
      return false;
    }
  };
  const evalWith = (name: string, v: number | boolean): boolean => run({ ...base, [name]: v });
  const samples: number[] = [];
  for (let v = 0; v < 256; v++) samples.push(v);
  for (const v of [256, 257, 1000, 0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff]) samples.push(v);
  const candidates: { c: any; test: (o: Record<string, any>) => boolean }[] = [];
  const dependsOn = ints.filter((f) => samples.some((v) => evalWith(f.name, v) !== evalWith(f.name, 0)));
  if (dependsOn.length === 0) {
    const always = run(base);
    candidates.push({ c: { op: always ? 'true' : 'false' }, test: () => always });
  } else if (dependsOn.length === 1) {
    const name = dependsOn[0]!.name;
    const truth = samples.map((v) => evalWith(name, v));
    const trues = samples.filter((_, i) => truth[i]);
    const falses = samples.filter((_, i) => !truth[i]);
    if (trues.length === 1)
      candidates.push({ c: { op: 'eq', field: name, value: trues[0] }, test: (o) => o[name] === trues[0] });
    if (falses.length === 1)
      candidates.push({ c: { op: 'ne', field: name, value: falses[0] }, test: (o) => o[name] !== falses[0] });
    // Bits that turn it on from zero (any/no bits), or off from all-ones (all bits).
    let any = 0;
    let all = 0;
    for (let b = 0; b < 31; b++) {
      if (evalWith(name, 2 ** b) !== evalWith(name, 0)) any |= 2 ** b;
      if (evalWith(name, 0x7fffffff & ~(2 ** b)) !== evalWith(name, 0x7fffffff)) all |= 2 ** b;
    }
    if (any !== 0) {
      candidates.push({ c: { op: 'anyBits', field: name, mask: any }, test: (o) => (o[name] & any) !== 0 });
      candidates.push({ c: { op: 'noBits', field: name, mask: any }, test: (o) => (o[name] & any) === 0 });
    }
    if (all !== 0)
      candidates.push({ c: { op: 'allBits', field: name, mask: all }, test: (o) => (o[name] & all) === all });
  }
  // A candidate must agree with the function everywhere we look: every single-field sample, and
  // random combinations of small and boundary values over all the earlier fields (this catches
  // conditions on two fields, which no single-field form expresses).
  const pool = [0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 128, 255, 256, 0xffff];
  let seed = 12345;
  const rand = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
    return seed % n;
  };
  const probes: Record<string, unknown>[] = [];
  for (const f of ints) for (const v of samples) probes.push({ ...base, [f.name]: v });
  for (let i = 0; i < 3000; i++) {
    const o: Record<string, unknown> = { ...base };
    for (const f of ints) o[f.name] = f.codec.info.kind === 'bool' ? rand(2) === 1 : pool[rand(pool.length)];
    probes.push(o);
  }
  for (const cand of candidates) {
    if (probes.every((o) => cand.test(o as Record<string, any>) === run(o))) return cand.c as Condition;
  }
  return undefined;
}

function header(proto: string, description: string): string {
  return `-- Generated by \`gamewire dissector\` from gamewire's message declarations. Do not edit:
-- regenerate instead. ${description}
-- Load: wireshark -X lua_script:${proto}.lua   or copy into the personal plugins folder.
`;
}

function assemble(
  protoName: string,
  abbrev: string,
  title: string,
  description: string,
  w: SchemaWriter,
  schema: string,
  glue: string,
): string {
  return `${header(protoName, description)}
local P = Proto(${luaString(abbrev)}, ${luaString(title)})
local F = {}
${LUA_RUNTIME}
-- Fields.
${w.fields.join('\n')}
local F_MSG = ProtoField.string(${luaString(`${abbrev}.message`)}, "message")
local F_DIR = ProtoField.string(${luaString(`${abbrev}.hdr.direction`)}, "direction")
F[#F + 1] = F_MSG
F[#F + 1] = F_DIR
${schema}
${glue}
P.fields = F
`;
}

// ---- NoxVR --------------------------------------------------------------------------------------

function noxDissector(): Dissector {
  const w = new SchemaWriter('gw_nox');
  const uid = w.field('uid', 'uid', 'uint16', 'base.DEC', 'request id echoed in the reply (0xFFFF: system)');
  const len = w.field('hdr.length', 'length', 'uint16', 'base.DEC');
  const up = w.union(clientMessages.info as any, '', 0);
  const down = w.union(serverMessages.info as any, '', 0);
  const schema = `local UP = ${up}\nlocal DOWN = ${down}\nlocal F_UID = ${uid}\nlocal F_LEN = ${len}`;
  const glue = String.raw`
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
`;
  return {
    protocol: 'nox-relay',
    file: 'gamewire-nox-relay.lua',
    lua: assemble(
      'gamewire-nox-relay',
      'gw_nox',
      'gamewire NoxVR Relay',
      'NoxVR Relay v1 over TCP and UDP.',
      w,
      schema,
      glue,
    ),
  };
}

// ---- Unity Relay --------------------------------------------------------------------------------

function unityDissector(): Dissector {
  const w = new SchemaWriter('gw_unity');
  const frame = w.node(RelayFrame as Codec<unknown>, '', 'frame', undefined, 0);
  const schema = `local FRAME = ${frame}`;
  const glue = String.raw`
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
`;
  return {
    protocol: 'unity-relay',
    file: 'gamewire-unity-relay.lua',
    lua: assemble(
      'gamewire-unity-relay',
      'gw_unity',
      'gamewire Unity Relay',
      'Unity Relay message protocol over UDP.',
      w,
      schema,
      glue,
    ),
  };
}

// ---- JS5 ----------------------------------------------------------------------------------------

function js5Dissector(): Dissector {
  const w = new SchemaWriter('gw_js5');
  const hs = w.node(Handshake as Codec<unknown>, 'handshake', 'handshake', undefined, 0);
  const reply = w.node(HandshakeReply as Codec<unknown>, 'handshakeReply', 'handshakeReply', undefined, 0);
  const req = w.union(Js5Request.info as any, '', 0);
  const r = (name: string, ctor: string, extra: string, doc?: string) =>
    w.field(`response.${name}`, name, ctor, extra, doc);
  const resp = {
    archive: r('archive', 'uint8', 'base.DEC'),
    group: r('group', 'uint16', 'base.DEC'),
    prefetch: r(
      'prefetch',
      'uint8',
      'base.DEC, { [0] = "false", [1] = "true" }',
      '0x80 bit of the compression byte',
    ),
    compression: r(
      'compression',
      'uint8',
      'base.DEC, { [0] = "none", [1] = "bzip2", [2] = "gzip", [3] = "lzma" }',
    ),
    length: w.field('response.hdr.length', 'length', 'int32', 'base.DEC'),
    uncompressedLength: r('uncompressedLength', 'int32', 'base.DEC'),
    data: r('data', 'bytes', 'base.NONE', 'container data, still compressed'),
    xor: w.field('hdr.xor', 'xor key', 'uint8', 'base.DEC'),
  };
  const schema = `local HANDSHAKE = ${hs}\nlocal REPLY = ${reply}\nlocal REQUEST = ${req}\nlocal R = {
  archive = ${resp.archive}, group = ${resp.group}, prefetch = ${resp.prefetch}, compression = ${resp.compression},
  length = ${resp.length}, uncompressedLength = ${resp.uncompressedLength}, data = ${resp.data}, xor = ${resp.xor} }`;
  const glue = String.raw`
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
`;
  return {
    protocol: 'js5',
    file: 'gamewire-js5.lua',
    lua: assemble('gamewire-js5', 'gw_js5', 'gamewire JS5', 'JS5 cache protocol over TCP.', w, schema, glue),
  };
}

// ---- RMC ----------------------------------------------------------------------------------------

function rmcDissector(): Dissector {
  const w = new SchemaWriter('gw_rmc');
  const request = w.node(VerboseRequestBody as Codec<unknown>, 'request', 'request', undefined, 0);
  const success = w.node(VerboseSuccessBody as Codec<unknown>, 'response', 'response', undefined, 0);
  const failure = w.node(HyperscapeFailureBody as Codec<unknown>, 'error', 'error', undefined, 0);
  const protoRequest = w.field('request.protocol', 'protocol', 'string', 'base.UNICODE');
  const protoResponse = w.field('response.protocol', 'protocol', 'string', 'base.UNICODE');
  const protoError = w.field('error.protocol', 'protocol', 'string', 'base.UNICODE');
  const methods: string[] = [];
  for (const p of BUILTIN_PROTOCOLS as any[]) {
    for (const [short, m] of p.byName as Map<string, any>) {
      const full = `${p.name}::${short}`;
      const a =
        m.args !== undefined ? w.node(m.args, `${p.name}.${short}.args`, 'args', undefined, 1) : 'nil';
      const r =
        m.results !== undefined
          ? w.node(m.results, `${p.name}.${short}.results`, 'results', undefined, 1)
          : 'nil';
      methods.push(`[${luaString(full)}] = { args = ${a}, results = ${r} }`);
    }
  }
  const schema = `local REQUEST = ${request}\nlocal SUCCESS = ${success}\nlocal FAILURE = ${failure}
local F_PROTO = { request = ${protoRequest}, response = ${protoResponse}, error = ${protoError} }
local METHODS = {\n  ${methods.join(',\n  ')}\n}`;
  const glue = String.raw`
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
`;
  return {
    protocol: 'rmc',
    file: 'gamewire-rmc.lua',
    lua: assemble(
      'gamewire-rmc',
      'gw_rmc',
      'gamewire Rendez-Vous RMC',
      'RMC over TCP (HyperScape envelope).',
      w,
      schema,
      glue,
    ),
  };
}

/** Every generated dissector. */
export function generateDissectors(): Dissector[] {
  return [js5Dissector(), rmcDissector(), unityDissector(), noxDissector()];
}
