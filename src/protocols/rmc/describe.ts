/**
 * Human-readable signatures from the declarations (`codec.info`), for `gamewire rmc methods`
 * and for server authors who want to print what a protocol expects.
 */
import type { Codec } from '../../wire/index.js';
import type { MethodDef, ProtocolDef } from './signature.js';

/** `List<StationURL>`, `u32`, `{key: String, value: u32}`… */
export function typeName(codec: Codec<unknown>): string {
  const i = codec.info;
  switch (i.kind) {
    case 'int':
      return `${i.signed ? 'i' : 'u'}${i.bits}`;
    case 'bigint':
      return `${i.signed ? 'i' : 'u'}64`;
    case 'float':
      return i.bits === 32 ? 'float' : 'double';
    case 'bool':
      return 'bool';
    case 'string':
      return 'String';
    case 'bytes':
      return i.length.type === 'fixed' ? `bytes[${i.length.value}]` : 'bytes';
    case 'array':
      return `List<${typeName(i.element)}>`;
    case 'struct':
      return i.name ?? `{${i.fields.map((f) => `${f.name}: ${typeName(f.codec)}`).join(', ')}}`;
    case 'sized':
      return typeName(i.inner);
    case 'union':
      return i.variants.map((v) => v.name).join(' | ');
    case 'lazy':
      return 'lazy';
    case 'custom':
      return i.name.startsWith('rmc.') ? i.name.slice(4) : i.name;
  }
  return (i as { kind: string }).kind;
}

function fieldList(codec: Codec<unknown>): string {
  const i = codec.info;
  if (i.kind !== 'struct') return typeName(codec);
  return i.fields.map((f) => `${f.name}: ${typeName(f.codec)}`).join(', ');
}

/** `LoginProtocol::Register_V1(vecMyURLs: List<StationURL>) -> (retval: qResult, …)`. */
export function describeMethod(m: MethodDef): string {
  return `${m.fullName}(${fieldList(m.args)}) -> (${fieldList(m.results)})`;
}

export interface MethodSummary {
  method: string;
  layout: string;
  args: string;
  results: string;
  doc: string;
}

export function summarizeProtocol(p: ProtocolDef<any>): MethodSummary[] {
  return [...p.byName.values()].map((m) => ({
    method: m.fullName,
    layout: m.layout,
    args: fieldList(m.args),
    results: fieldList(m.results),
    doc: m.doc,
  }));
}
