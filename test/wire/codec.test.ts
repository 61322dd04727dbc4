import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  array,
  arrayOfBytes,
  bytes,
  constant,
  custom,
  DecodeError,
  decode,
  EncodeError,
  encode,
  encodeInto,
  enumOf,
  type Infer,
  lazy,
  message,
  sized,
  string,
  struct,
  t,
  union,
  WireWriter,
  when,
} from '../../src/wire/index.js';

const Point = struct({ x: t.i16be, y: t.i16le });
const Hello = message('Hello', {
  magic: constant(t.u16be, 0xda72),
  version: enumOf(t.u8, { v1: 1, v2: 2 }),
  name: string(t.u16be),
  tag: bytes(2),
  points: array(Point, t.u8),
  extra: when((m) => m.version === 2, t.u64le),
});
const Bye = message('Bye', { reason: string('rest', { encoding: 'latin1' }) });
const Messages = union(t.u8, { Hello: [1, Hello], Bye: [2, Bye] });

type HelloValue = Infer<typeof Hello>;
const hello: HelloValue = {
  type: 'Hello',
  version: 2,
  name: 'hé',
  tag: Buffer.from('abcd', 'hex'),
  points: [{ x: -1, y: 2 }],
  extra: 2n ** 60n,
};

function err(fn: () => unknown): DecodeError {
  try {
    fn();
  } catch (e) {
    if (e instanceof DecodeError) return e;
    throw e;
  }
  throw new Error('expected a DecodeError');
}

describe('declared codecs', () => {
  it('encode and decode a declared message, constant and condition included', () => {
    const bytes = encode(Messages, hello);
    expect(bytes.toString('hex')).toBe(
      '01da72020003 68c3a9 abcd 01 ffff0200 0000000000000010'.replace(/\s/g, ''),
    );
    expect(decode(Messages, bytes)).toEqual(hello);
  });

  it('leaves a conditional field out when its condition is false', () => {
    const v1 = { ...hello, version: 1, extra: undefined };
    const bytes = encode(Messages, v1);
    expect(bytes.length).toBe(encode(Messages, hello).length - 8);
    expect(decode(Messages, bytes)).toEqual(v1);
  });

  it('reports errors with a stable code, the offset and the field path', () => {
    const bytes = encode(Messages, hello);
    // The array's count is checked against the bytes left before any element is read.
    expect(err(() => decode(Messages, bytes.subarray(0, 15)))).toMatchObject({
      code: 'ERR_INCOMPLETE',
      path: 'points',
    });
    expect(err(() => decode(Messages, bytes.subarray(0, bytes.length - 3)))).toMatchObject({
      code: 'ERR_INCOMPLETE',
      path: 'extra',
      offset: 16,
    });
    const badMagic = Buffer.from(bytes);
    badMagic[1] = 0;
    expect(err(() => decode(Messages, badMagic))).toMatchObject({
      code: 'ERR_BAD_MAGIC',
      offset: 1,
      path: 'magic',
    });
    const badEnum = Buffer.from(bytes);
    badEnum[3] = 9;
    expect(err(() => decode(Messages, badEnum))).toMatchObject({
      code: 'ERR_BAD_VALUE',
      offset: 3,
      path: 'version',
    });
    expect(err(() => decode(Messages, Buffer.from([7])))).toMatchObject({
      code: 'ERR_UNKNOWN_TYPE',
      offset: 0,
    });
    expect(err(() => decode(Messages, Buffer.concat([bytes, Buffer.from([0])])))).toMatchObject({
      code: 'ERR_TRAILING_BYTES',
      offset: bytes.length,
    });
  });

  it('checks array counts against the limit and the remaining bytes before allocating', () => {
    const Many = array(t.u32le, t.u32le);
    expect(err(() => decode(Many, Buffer.from('ffffffff', 'hex'))).code).toBe('ERR_TOO_LARGE');
    expect(
      err(() => decode(Many, Buffer.from('00010000', 'hex'), { limits: { maxArrayLength: 1e6 } })).code,
    ).toBe('ERR_INCOMPLETE');
  });

  it('sized regions must be filled exactly, and are written with back-patched sizes', () => {
    const S = sized(t.u16be, struct({ a: t.u8, rest: arrayOfBytes(t.u8, t.u8) }));
    const bytes = encode(S, { a: 1, rest: [2, 3] });
    expect(bytes.toString('hex')).toBe('0004010202 03'.replace(/\s/g, ''));
    expect(err(() => decode(S, Buffer.from('0005010202030', 'hex')))).toMatchObject({
      code: 'ERR_INCOMPLETE',
    });
    expect(err(() => decode(S, Buffer.from('000501020203ff', 'hex')))).toMatchObject({
      code: 'ERR_TRAILING_BYTES',
    });
    expect(err(() => decode(S, Buffer.from('0003010203', 'hex')))).toMatchObject({ code: 'ERR_OVERRUN' });
  });

  it('a per-field string cap counts the string bytes, not the NUL, on decode and encode alike', () => {
    const Capped = string(t.u16le, { nulTerminated: true, maxBytes: 2 });
    expect(decode(Capped, encode(Capped, 'ab'))).toBe('ab');
    expect(() => encode(Capped, 'abc')).toThrow(EncodeError);
    expect(err(() => decode(Capped, Buffer.from('040061626300', 'hex'))).code).toBe('ERR_TOO_LARGE');
    const Plain = string(t.u8, { maxBytes: 2 });
    expect(decode(Plain, encode(Plain, 'ab'))).toBe('ab');
    expect(err(() => decode(Plain, Buffer.from('03616263', 'hex'))).code).toBe('ERR_TOO_LARGE');
  });

  it('NUL-terminated strings count their NUL and insist on it', () => {
    const Q = string(t.u16le, { nulTerminated: true });
    expect(encode(Q, 'ab').toString('hex')).toBe('0300616200');
    expect(decode(Q, Buffer.from('0300616200', 'hex'))).toBe('ab');
    expect(err(() => decode(Q, Buffer.from('0300616201', 'hex')))).toMatchObject({
      code: 'ERR_BAD_STRING',
      offset: 4,
    });
  });

  it('lazy codecs recurse under the depth limit', () => {
    type Tree = { kids: Tree[] };
    const TreeCodec: ReturnType<typeof struct<{ kids: ReturnType<typeof array<Tree>> }>> = struct({
      kids: array(
        lazy(() => TreeCodec as never),
        t.u8,
      ),
    }) as never;
    const deep = Buffer.alloc(40, 1);
    deep[39] = 0;
    expect(err(() => decode(TreeCodec, deep)).code).toBe('ERR_TOO_DEEP');
    expect(decode(TreeCodec, Buffer.from('010100', 'hex'))).toEqual({ kids: [{ kids: [{ kids: [] }] }] });
  });

  it('JSON form: bytes as hex, u64 beyond 2^53 as strings, floats exact', () => {
    const json = Messages.toJson(hello);
    expect(json).toEqual({
      type: 'Hello',
      version: 2,
      name: 'hé',
      tag: 'abcd',
      points: [{ x: -1, y: 2 }],
      extra: '1152921504606846976',
    });
    expect(Messages.fromJson(json, '')).toEqual(hello);
    const F = struct({ a: t.f32le, b: t.f64be });
    expect(F.toJson({ a: -0, b: Number.NaN })).toEqual({ a: '-0', b: 'NaN' });
    expect(
      encode(F, F.fromJson({ a: '-0', b: 'NaN' }, '') as never)
        .toString('hex')
        .slice(0, 8),
    ).toBe('00000080');
  });

  it('JSON input is validated with a path', () => {
    const bad = (j: unknown) => {
      try {
        Messages.fromJson(j, '');
      } catch (e) {
        expect(e).toBeInstanceOf(EncodeError);
        return (e as EncodeError).path;
      }
      throw new Error('expected an EncodeError');
    };
    expect(bad({ type: 'Nope' })).toBe('type');
    expect(bad({ ...(Messages.toJson(hello) as object), version: 3 })).toBe('version');
    expect(bad({ ...(Messages.toJson(hello) as object), tag: 'abc' })).toBe('tag');
    expect(bad({ ...(Messages.toJson(hello) as object), points: [{ x: 1e6, y: 0 }] })).toBe('points[0].x');
    expect(bad({ ...(Messages.toJson(hello) as object), surplus: 1 })).toBe('surplus');
  });

  it('decode is re-entrant: a custom codec may decode a nested container', () => {
    const Inner = struct({ a: t.u8, b: t.u8 });
    const Outer = struct({
      n: t.u8,
      inner: custom({
        name: 'nested',
        description: 'u8 length + an Inner decoded on its own',
        read: (r) => decode(Inner, r.bytes(r.u8())),
        write: (w, v) => {
          w.u8(2);
          Inner.write(w, v);
        },
        toJson: (v) => Inner.toJson(v),
        fromJson: (j, p) => Inner.fromJson(j, p),
      }),
      m: t.u8,
    });
    expect(decode(Outer, Buffer.from('0702010209', 'hex'))).toEqual({ n: 7, inner: { a: 1, b: 2 }, m: 9 });
    expect(() => decode(Outer, Buffer.from('07020102', 'hex'))).toThrow(DecodeError);
    expect(decode(Outer, Buffer.from('0702030409', 'hex'))).toEqual({ n: 7, inner: { a: 3, b: 4 }, m: 9 });
  });

  it('encodes into a reused writer without allocating a new buffer', () => {
    const w = new WireWriter({ initialCapacity: 64 });
    const a = encodeInto(Messages, hello, w);
    const buffer = w.buf;
    const b = encodeInto(Messages, hello, w);
    expect(w.buf).toBe(buffer);
    expect(a.buffer).toBe(b.buffer);
  });

  it('is introspectable: fields, types, byte order and conditions', () => {
    const info = Hello.info;
    expect(info.kind).toBe('struct');
    if (info.kind !== 'struct') return;
    expect(info.fields.map((f) => [f.name, f.codec.info.kind])).toEqual([
      ['magic', 'int'],
      ['version', 'enum'],
      ['name', 'string'],
      ['tag', 'bytes'],
      ['points', 'array'],
      ['extra', 'bigint'],
    ]);
    expect(info.fields[0]!.isConstant).toBe(true);
    expect(info.fields[0]!.codec.info).toEqual({ kind: 'int', bits: 16, signed: false, endian: 'be' });
    expect(info.fields[5]!.when).toBeTypeOf('function');
  });

  it('round-trips arbitrary values and rejects arbitrary bytes only with DecodeError', () => {
    const helloArb = fc.record({
      type: fc.constant('Hello' as const),
      version: fc.constant(1),
      name: fc.string({ maxLength: 10 }),
      tag: fc.uint8Array({ minLength: 2, maxLength: 2 }).map((b) => Buffer.from(b)),
      points: fc.array(
        fc.record({ x: fc.integer({ min: -32768, max: 32767 }), y: fc.integer({ min: -32768, max: 32767 }) }),
        {
          maxLength: 5,
        },
      ),
      extra: fc.constant(undefined),
    });
    fc.assert(
      fc.property(helloArb, (v) => {
        expect(decode(Messages, encode(Messages, v))).toEqual(v);
      }),
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (b) => {
        try {
          decode(Messages, b);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 2000 },
    );
  });
});
