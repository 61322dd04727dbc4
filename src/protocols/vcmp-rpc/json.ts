/**
 * The JSON form of LibRPC values (the CLI's form is the value model itself; only floats and
 * shape checks need care).
 */
import { badInput, floatFromJson, floatToJson, type Json, t } from '../../wire/index.js';
import { isNamedCall, type RpcCall, type RpcValue, type TopItem } from './values.js';

const INT_MIN = -(2 ** 31);
const UINT_MAX = 2 ** 32 - 1;

export function valueToJson(v: RpcValue): Json {
  switch (v.type) {
    case 'float':
      return { type: 'float', value: floatToJson(v.value) };
    case 'vector':
      return { type: 'vector', x: floatToJson(v.x), y: floatToJson(v.y), z: floatToJson(v.z) };
    case 'quaternion':
      return {
        type: 'quaternion',
        x: floatToJson(v.x),
        y: floatToJson(v.y),
        z: floatToJson(v.z),
        w: floatToJson(v.w),
      };
    case 'array':
      return { type: 'array', items: v.items.map(valueToJson) };
    case 'get':
      return { type: 'get', path: v.path.map(valueToJson) };
    case 'call':
      return callToJson(v);
    default:
      return v as Json;
  }
}

export function callToJson(c: RpcCall): Json {
  return isNamedCall(c)
    ? { type: 'call', tag: c.tag, name: c.name, args: c.args.map(valueToJson) }
    : { type: 'call', tag: c.tag, callee: valueToJson(c.callee), args: c.args.map(valueToJson) };
}

type JsonObject = Record<string, unknown>;

function objectAt(j: unknown, path: string, keys: readonly string[]): JsonObject {
  if (typeof j !== 'object' || j === null || Array.isArray(j)) throw badInput(path, 'expected an object');
  for (const k of Object.keys(j)) {
    if (!keys.includes(k)) throw badInput(`${path}.${k}`, 'unknown field');
  }
  for (const k of keys) {
    if (!Object.hasOwn(j, k)) throw badInput(`${path}.${k}`, 'missing field');
  }
  return j as JsonObject;
}

function listAt(j: unknown, path: string): unknown[] {
  if (!Array.isArray(j)) throw badInput(path, 'expected an array');
  return j;
}

export function valueFromJson(j: unknown, path: string): RpcValue {
  const type = typeof j === 'object' && j !== null ? (j as JsonObject).type : undefined;
  switch (type) {
    case 'null':
      objectAt(j, path, ['type']);
      return { type: 'null' };
    case 'int':
      return { type: 'int', value: intIn(objectAt(j, path, ['type', 'value']), path) };
    case 'float':
      return {
        type: 'float',
        value: floatFromJson(objectAt(j, path, ['type', 'value']).value, `${path}.value`),
      };
    case 'bool': {
      const o = objectAt(j, path, ['type', 'value']);
      return { type: 'bool', value: t.bool.fromJson(o.value, `${path}.value`) };
    }
    case 'string': {
      const o = objectAt(j, path, ['type', 'value']);
      if (typeof o.value !== 'string') throw badInput(`${path}.value`, 'expected a string');
      return { type: 'string', value: o.value };
    }
    case 'vector': {
      const o = objectAt(j, path, ['type', 'x', 'y', 'z']);
      return {
        type: 'vector',
        x: floatFromJson(o.x, `${path}.x`),
        y: floatFromJson(o.y, `${path}.y`),
        z: floatFromJson(o.z, `${path}.z`),
      };
    }
    case 'quaternion': {
      const o = objectAt(j, path, ['type', 'x', 'y', 'z', 'w']);
      return {
        type: 'quaternion',
        x: floatFromJson(o.x, `${path}.x`),
        y: floatFromJson(o.y, `${path}.y`),
        z: floatFromJson(o.z, `${path}.z`),
        w: floatFromJson(o.w, `${path}.w`),
      };
    }
    case 'array': {
      const o = objectAt(j, path, ['type', 'items']);
      return {
        type: 'array',
        items: listAt(o.items, `${path}.items`).map((x, i) => valueFromJson(x, `${path}.items[${i}]`)),
      };
    }
    case 'get': {
      const o = objectAt(j, path, ['type', 'path']);
      return {
        type: 'get',
        path: listAt(o.path, `${path}.path`).map((x, i) => valueFromJson(x, `${path}.path[${i}]`)),
      };
    }
    case 'call':
      return callFromJson(j, path);
    default:
      throw badInput(
        `${path}.type`,
        'expected one of null, int, float, bool, string, vector, quaternion, array, call, get',
      );
  }
}

function intIn(j: unknown, path: string): number {
  const v = (j as JsonObject).value;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < INT_MIN || v > UINT_MAX) {
    throw badInput(`${path}.value`, 'expected an integer in int32 or uint32 range');
  }
  return v;
}

function callFromJson(j: unknown, path: string): RpcCall {
  const tag = (j as JsonObject).tag;
  if (tag === 'F' || tag === 'E') {
    const o = objectAt(j, path, ['type', 'tag', 'name', 'args']);
    if (typeof o.name !== 'string') throw badInput(`${path}.name`, 'expected a string');
    return { type: 'call', tag, name: o.name, args: argsFromJson(o.args, `${path}.args`) };
  }
  if (tag === 'G' || tag === 'D') {
    const o = objectAt(j, path, ['type', 'tag', 'callee', 'args']);
    return {
      type: 'call',
      tag,
      callee: valueFromJson(o.callee, `${path}.callee`),
      args: argsFromJson(o.args, `${path}.args`),
    };
  }
  throw badInput(`${path}.tag`, 'expected F, G, E or D');
}

function argsFromJson(j: unknown, path: string): RpcValue[] {
  return listAt(j, path).map((x, i) => valueFromJson(x, `${path}[${i}]`));
}

export function topFromJson(j: unknown, path: string): TopItem {
  if (typeof j === 'object' && j !== null && (j as JsonObject).type === 'set') {
    const o = objectAt(j, path, ['type', 'values']);
    return { type: 'set', values: argsFromJson(o.values, `${path}.values`) };
  }
  const v = valueFromJson(j, path);
  if (v.type !== 'call') throw badInput(`${path}.type`, 'a ServerData item is a call or a set');
  return v;
}
