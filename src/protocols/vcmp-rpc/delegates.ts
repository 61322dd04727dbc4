/**
 * Squirrel's built-in delegates (the methods every value of a type has), for the executor's
 * `delegate` hook. On a real NPC, `RFCa('len')('hello')` returns 5 because the name is not a slot
 * of the string and Squirrel falls back to the string delegate; this table reproduces the common
 * ones so such packets behave the same. It is a subset: weakref, closures' and classes' delegates,
 * and the array methods taking closures (sort with a comparator, map, apply, reduce, filter) are
 * left out.
 */
import { GamewireError } from '../../wire/errors.js';
import { Quaternion, Vector } from './builder.js';

/** A Squirrel built-in refused its arguments (the executor reports it as `ERR_RPC_THROWN`). */
export class SquirrelError extends GamewireError {
  constructor(message: string) {
    super('ERR_RPC_THROWN', message);
  }

  override get name(): string {
    return 'SquirrelError';
  }
}

type Method = (this: unknown, ...args: unknown[]) => unknown;

function squirrelToString(v: unknown): string {
  if (v === null || v === undefined) return '(null : 0x0)';
  if (typeof v === 'number' && !Number.isInteger(v)) return String(Math.fround(v));
  return String(v);
}

function toInteger(v: unknown): number {
  if (typeof v === 'boolean') return v ? 1 : 0;
  const n = typeof v === 'string' ? Number.parseInt(v, 10) : Number(v);
  return Number.isFinite(n) ? Math.trunc(n) | 0 : 0;
}

function toFloat(v: unknown): number {
  if (typeof v === 'boolean') return v ? 1 : 0;
  const n = typeof v === 'string' ? Number.parseFloat(v) : Number(v);
  return Number.isNaN(n) ? 0 : n;
}

const NUMBER: Record<string, Method> = {
  tointeger() {
    return toInteger(this);
  },
  tofloat() {
    return toFloat(this);
  },
  tostring() {
    return squirrelToString(Number(this));
  },
  tochar() {
    return String.fromCharCode(toInteger(this) & 0xff);
  },
};

const BOOL: Record<string, Method> = {
  tointeger() {
    return toInteger(this);
  },
  tofloat() {
    return toFloat(this);
  },
  tostring() {
    return String(this === true);
  },
};

function asString(self: unknown): string {
  return String(self);
}

/** Squirrel's slice: negative indices count from the end; reversed or out of range is an error. */
function sliceBounds(length: number, start: unknown, end: unknown): [number, number] {
  let s = start === undefined ? 0 : toInteger(start);
  let e = end === undefined ? length : toInteger(end);
  if (s < 0) s += length;
  if (e < 0) e += length;
  if (e < s) throw new SquirrelError('wrong indexes');
  if (s < 0 || e > length) throw new SquirrelError('slice out of range');
  return [s, e];
}

/** tolower/toupper: the case changes between start and end only, like Squirrel's. */
function caseRange(self: unknown, start: unknown, end: unknown, change: (s: string) => string): string {
  const s = asString(self);
  const [a, b] = sliceBounds(s.length, start, end);
  return s.slice(0, a) + change(s.slice(a, b)) + s.slice(b);
}

const STRING: Record<string, Method> = {
  len() {
    return Buffer.byteLength(asString(this), 'utf8');
  },
  tointeger(base) {
    if (base === undefined) return toInteger(asString(this));
    const n = Number.parseInt(asString(this), toInteger(base));
    return Number.isFinite(n) ? n | 0 : 0;
  },
  tofloat() {
    return toFloat(asString(this));
  },
  tostring() {
    return asString(this);
  },
  slice(start, end) {
    const s = asString(this);
    const [a, b] = sliceBounds(s.length, start, end);
    return s.slice(a, b);
  },
  find(sub, start) {
    const i = asString(this).indexOf(String(sub), start === undefined ? 0 : toInteger(start));
    return i < 0 ? null : i;
  },
  tolower(start, end) {
    return caseRange(this, start, end, (x) => x.toLowerCase());
  },
  toupper(start, end) {
    return caseRange(this, start, end, (x) => x.toUpperCase());
  },
};

function asArray(self: unknown): unknown[] {
  return self as unknown[];
}

const ARRAY: Record<string, Method> = {
  len() {
    return asArray(this).length;
  },
  append(v) {
    asArray(this).push(v);
    return this;
  },
  push(v) {
    asArray(this).push(v);
    return this;
  },
  extend(other) {
    if (Array.isArray(other)) asArray(this).push(...other);
    return this;
  },
  pop() {
    const a = asArray(this);
    if (a.length === 0) throw new SquirrelError('empty array');
    return a.pop();
  },
  top() {
    const a = asArray(this);
    if (a.length === 0) throw new SquirrelError('empty array');
    return a[a.length - 1];
  },
  insert(index, v) {
    const a = asArray(this);
    const i = toInteger(index);
    if (i < 0 || i > a.length) throw new SquirrelError('index out of range');
    a.splice(i, 0, v);
    return this;
  },
  remove(index) {
    const a = asArray(this);
    const i = toInteger(index);
    if (i < 0 || i >= a.length) throw new SquirrelError('index out of range');
    return a.splice(i, 1)[0];
  },
  resize(size, fill) {
    const a = asArray(this);
    const n = toInteger(size);
    if (n < 0) throw new SquirrelError('negative size');
    while (a.length > n) a.pop();
    while (a.length < n) a.push(fill ?? null);
    return this;
  },
  reverse() {
    asArray(this).reverse();
    return this;
  },
  slice(start, end) {
    const a = asArray(this);
    const [s, e] = sliceBounds(a.length, start, end);
    return a.slice(s, e);
  },
  find(v) {
    const i = asArray(this).indexOf(v);
    return i < 0 ? null : i;
  },
  clear() {
    asArray(this).length = 0;
    return this;
  },
  tostring() {
    return '(array : 0x0)';
  },
};

/** Table methods on plain objects and Maps (own keys only). */
const TABLE: Record<string, Method> = {
  len() {
    return this instanceof Map ? this.size : Object.keys(this as object).length;
  },
  rawget(key) {
    if (this instanceof Map) {
      if (!this.has(key)) throw new SquirrelError(`the index '${String(key)}' does not exist`);
      return this.get(key);
    }
    const k = String(key);
    if (!Object.hasOwn(this as object, k)) throw new SquirrelError(`the index '${k}' does not exist`);
    return (this as Record<string, unknown>)[k];
  },
  rawin(key) {
    return this instanceof Map ? this.has(key) : Object.hasOwn(this as object, String(key));
  },
  rawset(key, value) {
    if (this instanceof Map) this.set(key, value);
    else if (!['__proto__', 'constructor', 'prototype'].includes(String(key)))
      (this as Record<string, unknown>)[String(key)] = value;
    return this;
  },
  rawdelete(key) {
    if (this instanceof Map) {
      const v = this.get(key);
      this.delete(key);
      return v;
    }
    const k = String(key);
    const v = (this as Record<string, unknown>)[k];
    if (Object.hasOwn(this as object, k)) delete (this as Record<string, unknown>)[k];
    return v;
  },
  clear() {
    if (this instanceof Map) this.clear();
    else for (const k of Object.keys(this as object)) delete (this as Record<string, unknown>)[k];
    return this;
  },
};

/**
 * Each built-in's parameters, `this` included, as Squirrel declares them: how many (n exactly,
 * or -n for at least n) and their types (one letter each: n number, s string, a array, t table,
 * . anything; `|` for either). A call that does not fit fails before the built-in runs, with
 * Squirrel's message, as on a real NPC.
 */
const PARAMS: Record<string, Record<string, [number, string]>> = {
  number: { tointeger: [1, 'n|b'], tofloat: [1, 'n|b'], tostring: [1, '.'], tochar: [1, 'n|b'] },
  bool: { tointeger: [1, 'n|b'], tofloat: [1, 'n|b'], tostring: [1, '.'] },
  string: {
    len: [1, 's'],
    tointeger: [-1, 'sn'],
    tofloat: [1, 's'],
    tostring: [1, '.'],
    slice: [-1, 'snn'],
    find: [-2, 'ssn'],
    tolower: [-1, 'snn'],
    toupper: [-1, 'snn'],
  },
  array: {
    len: [1, 'a'],
    append: [2, 'a'],
    push: [2, 'a'],
    extend: [2, 'aa'],
    pop: [1, 'a'],
    top: [1, 'a'],
    insert: [3, 'an'],
    remove: [2, 'an'],
    resize: [-2, 'an'],
    reverse: [1, 'a'],
    slice: [-1, 'ann'],
    find: [2, 'a.'],
    clear: [1, '.'],
    tostring: [1, '.'],
  },
  table: {
    len: [1, 't'],
    rawget: [2, 't'],
    rawset: [3, 't'],
    rawdelete: [2, 't'],
    rawin: [2, 't'],
    clear: [1, '.'],
  },
};

/** A value's Squirrel type letter, for the type masks above. */
function typeLetter(v: unknown): string {
  if (v === null || v === undefined) return 'o';
  if (typeof v === 'number') return 'n';
  if (typeof v === 'string') return 's';
  if (typeof v === 'boolean') return 'b';
  if (typeof v === 'function') return 'c';
  if (Array.isArray(v)) return 'a';
  if (v instanceof Vector || v instanceof Quaternion) return 'x';
  return 't';
}

const TYPE_NAMES: Record<string, string> = {
  o: 'null',
  n: 'integer|float',
  s: 'string',
  b: 'bool',
  c: 'function',
  a: 'array',
  x: 'instance',
  t: 'table',
};

function checked(params: number, mask: string, method: Method): Method {
  // 'n|b' is one parameter with two types; every other letter is one parameter.
  const types = mask.includes('|') ? [mask.replace('|', '')] : [...mask];
  return function (this: unknown, ...args: unknown[]) {
    const n = args.length + 1;
    if (params > 0 ? n !== params : n < -params) throw new SquirrelError('wrong number of parameters');
    for (let i = 1; i < types.length && i <= args.length; i++) {
      const letter = typeLetter(args[i - 1]);
      if (types[i] !== '.' && !types[i]!.includes(letter)) {
        throw new SquirrelError(
          `parameter ${i} has an invalid type '${TYPE_NAMES[letter]}' ; expected: '${[...types[i]!].map((t) => TYPE_NAMES[t]).join('|')}'`,
        );
      }
    }
    return method.apply(this, args);
  };
}

function withCounts(kind: string, table: Record<string, Method>): Record<string, Method> {
  const out: Record<string, Method> = {};
  for (const [name, method] of Object.entries(table)) {
    const [params, mask] = PARAMS[kind]![name]!;
    out[name] = checked(params, mask, method);
  }
  return out;
}

const CHECKED = {
  number: withCounts('number', NUMBER),
  bool: withCounts('bool', BOOL),
  string: withCounts('string', STRING),
  array: withCounts('array', ARRAY),
  table: withCounts('table', TABLE),
};

function own(table: Record<string, Method>, name: string): Method | undefined {
  return Object.hasOwn(table, name) ? table[name] : undefined;
}

/**
 * The `delegate` hook reproducing Squirrel's default delegates for integers and floats, bools,
 * strings, arrays and tables (plain objects and Maps). Vectors and quaternions are instances,
 * which have no default delegate.
 */
export function squirrelDelegates(target: unknown, name: string): unknown {
  switch (typeof target) {
    case 'number':
      return own(CHECKED.number, name);
    case 'boolean':
      return own(CHECKED.bool, name);
    case 'string':
      return own(CHECKED.string, name);
  }
  if (Array.isArray(target)) return own(CHECKED.array, name);
  if (target instanceof Vector || target instanceof Quaternion) return undefined;
  if (target instanceof Map || (typeof target === 'object' && target !== null))
    return own(CHECKED.table, name);
  return undefined;
}
