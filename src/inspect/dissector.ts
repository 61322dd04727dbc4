/**
 * `gamewire dissector`: Wireshark Lua dissectors generated from the protocols' declarations.
 *
 * Every declared message becomes a schema table (names, types, byte order, lengths, conditions,
 * value names) interpreted by a small Lua runtime (lua-runtime.ts). Each protocol declares its
 * dissector in `src/protocols/<name>/inspect.ts`, reached through its registry entry: either a
 * `FlowDeclaration` (messages and length-prefix framing: the whole dissector, framing included,
 * is generated here, the same declaration giving the inspector's decoder), or a
 * `DissectorDeclaration` (the schema plus the protocol's own Lua glue for what cannot be
 * declared: reassembly, XOR, block markers, nested packets). Field abbreviations are
 * `gw_<protocol>.<Message>.<field>[.<sub>]`, so a display filter such as
 * `gw_nox.Handshake.engine == "unity"` works.
 */

import {
  type CustomDissection,
  type DissectorDeclaration,
  type FlowDeclaration,
  isFlowDeclaration,
  prefixWidth,
  type SchemaItem,
} from '../core/flow.js';
import { registry } from '../protocols/registry.js';
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
  private readonly custom: Readonly<Record<string, CustomDissection>>;

  constructor(prefix: string, custom: Readonly<Record<string, CustomDissection>> = {}) {
    this.prefix = prefix;
    this.custom = custom;
  }

  /** A schema entry as Lua. */
  item(item: SchemaItem): string {
    if ('node' in item)
      return this.node(item.node, item.path, item.label ?? item.path, undefined, item.depth ?? 0);
    if ('union' in item) return this.union(item.union.info as any, item.path ?? '', 0);
    if ('field' in item) {
      const f = item.field;
      return this.field(f.path, f.label, f.type, f.display ?? '', f.doc);
    }
    const rows = item.table.map(([k, v]) => `[${luaString(k)}] = ${v === undefined ? 'nil' : this.item(v)}`);
    return rows.length === 0 ? '{}' : `{\n  ${rows.join(',\n  ')}\n}`;
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
        const c = this.custom[info.name];
        const f = this.field(
          path,
          label,
          c?.type ?? 'bytes',
          c?.display ?? 'base.NONE',
          doc ?? info.description,
        );
        const display2 =
          c?.second === 'bytes' ? 'base.NONE' : c?.second === 'string' ? 'base.UNICODE' : 'base.DEC';
        const f2 =
          c?.second === undefined ? '' : `, f2 = ${this.field(`${path}_u8`, label, c.second, display2)}`;
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

function customLua(custom: Readonly<Record<string, CustomDissection>>): string {
  const out: string[] = [];
  for (const [name, c] of Object.entries(custom)) {
    const body = c.lua
      .split('\n')
      .map((l) => `  ${l}`)
      .join('\n');
    out.push(`gw.custom[${luaString(name)}] = function(node, tvb, off, lim, tree)\n${body}\nend`);
  }
  return out.length === 0
    ? ''
    : `-- Hand-written parts of the declarations (custom codecs), by name.\n${out.join('\n')}\n`;
}

function assemble(
  protoName: string,
  abbrev: string,
  title: string,
  description: string,
  w: SchemaWriter,
  schema: string,
  glue: string,
  custom: Readonly<Record<string, CustomDissection>> = {},
): string {
  return `${header(protoName, description)}
local P = Proto(${luaString(abbrev)}, ${luaString(title)})
local F = {}
${LUA_RUNTIME}${customLua(custom)}
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

/** A dissector from a declaration and its glue. */
export function dissectorFrom(d: DissectorDeclaration): Dissector {
  const w = new SchemaWriter(d.abbrev, d.custom);
  const schema = d.schema.map(([name, item]) => `local ${name} = ${w.item(item)}`).join('\n');
  return {
    protocol: d.protocol,
    file: `gamewire-${d.protocol}.lua`,
    lua: assemble(`gamewire-${d.protocol}`, d.abbrev, d.title, d.description, w, schema, d.glue, d.custom),
  };
}

function prefixLua(f: FlowDeclaration['tcp']): string {
  if (f === undefined) return 'nil';
  const n = prefixWidth(f.prefix);
  return `{ at = ${f.at ?? 0}, n = ${n}, le = ${f.prefix.endsWith('le')}, rest = ${f.counts === 'rest'} }`;
}

function messagesItem(codec: Codec<unknown>, path: string): SchemaItem {
  return codec.info.kind === 'union'
    ? { union: codec, path }
    : { node: codec, path, label: 'message', depth: 0 };
}

/**
 * The whole dissector of a declared flow: its messages from the declaration, and framing,
 * direction, ports and content detection generated from the same declaration the inspector's
 * decoder uses (`declaredFlow` in src/core/flow.ts).
 */
export function declaredDissector(decl: FlowDeclaration): DissectorDeclaration {
  const sig = decl.clientSignature;
  const ports = [
    ...decl.tcpPorts.map((p) => `DissectorTable.get("tcp.port"):add(${p}, P)`),
    ...decl.udpPorts.map((p) => `DissectorTable.get("udp.port"):add(${p}, P)`),
  ].join('\n');
  const heuristics =
    sig === undefined
      ? ''
      : [
          decl.tcp === undefined
            ? ''
            : 'P:register_heuristic("tcp", function(tvb, pinfo, tree) return heuristic(tvb, pinfo, tree, TCP_PREFIX) end)',
          decl.udp === undefined
            ? ''
            : 'P:register_heuristic("udp", function(tvb, pinfo, tree) return heuristic(tvb, pinfo, tree, UDP_PREFIX) end)',
        ]
          .filter((l) => l !== '')
          .join('\n');
  const glue = `
local COLUMN = ${luaString(decl.column)}
local TCP_PREFIX = ${prefixLua(decl.tcp)}
local UDP_PREFIX = ${decl.udp === 'datagram' ? 'nil' : prefixLua(decl.udp)}
local SIGNATURE = ${sig === undefined ? 'nil' : `{ offset = ${sig.offset}, bytes = { ${sig.bytes.join(', ')} } }`}
local servers = {}

local function server_port(pinfo)
  local k = gw.conv_key(pinfo)
  if servers[k] == nil then servers[k] = pinfo.match_uint ~= 0 and pinfo.match_uint or pinfo.dst_port end
  return servers[k]
end

-- One message in tvb[off, stop), shown under an item spanning [from, stop).
local function message(tvb, from, off, stop, tree, isClient)
  local node = isClient and UP or DOWN
  local item = tree:add(P, tvb(from, stop - from))
  local name = "message"
  if node.k == "union" and stop - off >= node.tag.n then
    local tag = gw.uint(tvb, off, node.tag.n, node.tag.le, false)
    name = node.names[tag] or ("type " .. tag)
    item:add(F_MSG, tvb(off, node.tag.n), name)
  end
  item:add(F_DIR, gw.range(tvb, off, 0), isClient and "client" or "server")
  item:append_text(": " .. name)
  local ok, after = pcall(gw.walk, node, tvb, off, stop, item)
  if not ok then
    item:add_expert_info(PI_MALFORMED, PI_ERROR, "malformed " .. name)
  elseif after ~= stop then
    item:add_expert_info(PI_MALFORMED, PI_ERROR, (stop - after) .. " trailing byte(s)")
  end
end

-- The whole frame's length from its prefix.
local function frame_length(tvb, off, prefix)
  local v = gw.uint(tvb, off + prefix.at, prefix.n, prefix.le, false)
  if prefix.rest then return prefix.at + prefix.n + v end
  return v
end

function P.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = COLUMN
  local isClient = pinfo.dst_port == server_port(pinfo)
  local udp = pinfo.port_type == 3
  local n = tvb:len()
  -- Not "udp and UDP_PREFIX or TCP_PREFIX": a nil UDP_PREFIX (one message per datagram) would fall through.
  local prefix = TCP_PREFIX
  if udp then prefix = UDP_PREFIX end
  if prefix == nil then
    message(tvb, 0, 0, n, tree, isClient)
    return n
  end
  local head = prefix.at + prefix.n
  local off = 0
  while off < n do
    if n - off < head then
      if udp then tree:add_expert_info(PI_MALFORMED, PI_ERROR, "frame cut short"); return n end
      pinfo.desegment_offset = off
      pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
      return n
    end
    local l = frame_length(tvb, off, prefix)
    if l < head then tree:add_expert_info(PI_MALFORMED, PI_ERROR, "bad frame length"); return n end
    if off + l > n then
      if udp then tree:add_expert_info(PI_MALFORMED, PI_ERROR, "frame cut short"); return n end
      pinfo.desegment_offset = off
      pinfo.desegment_len = off + l - n
      return n
    end
    message(tvb, off, off + head, off + l, tree, isClient)
    off = off + l
  end
  return n
end

${ports}

-- Content detection: a client's first message starts with the declared signature.
local function heuristic(tvb, pinfo, tree, prefix)
  if SIGNATURE == nil then return false end
  local at = (prefix == nil and 0 or prefix.at + prefix.n) + SIGNATURE.offset
  if tvb:len() < at + #SIGNATURE.bytes then return false end
  for i, b in ipairs(SIGNATURE.bytes) do
    if tvb(at + i - 1, 1):uint() ~= b then return false end
  end
  -- The first message seen decides the server (a reply matching the signature must not flip it).
  local k = gw.conv_key(pinfo)
  if servers[k] == nil then servers[k] = pinfo.dst_port end
  pinfo.conversation = P
  P.dissector(tvb, pinfo, tree)
  return true
end
${heuristics}
`;
  return {
    protocol: decl.name,
    abbrev: decl.abbrev,
    title: decl.title,
    description: decl.description,
    schema: [
      ['UP', messagesItem(decl.messages.client, '')],
      ['DOWN', messagesItem(decl.messages.server, '')],
    ],
    glue,
  };
}

/** Every generated dissector: each registered protocol's, in registry order. */
export async function generateDissectors(options: Record<string, unknown> = {}): Promise<Dissector[]> {
  const out: Dissector[] = [];
  for (const entry of registry) {
    if (entry.loadInspection === undefined) continue;
    const inspection = await entry.loadInspection();
    const declared = inspection.dissectorsWith?.(options) ?? inspection.dissectors ?? [];
    for (const d of declared) out.push(dissectorFrom(d));
    for (const f of inspection.flows) if (isFlowDeclaration(f)) out.push(dissectorFrom(declaredDissector(f)));
  }
  return out;
}
