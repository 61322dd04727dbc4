import fc from 'fast-check';
import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  bytes,
  checkedFields,
  constant,
  DeclarationError,
  DecodeError,
  decode,
  EncodeError,
  encode,
  GamewireError,
  type Infer,
  is,
  message,
  select,
  struct,
  t,
  when,
} from '../../src/wire/index.js';

// An RMC-like envelope: a head with a request flag, then a request body or a response body that
// branches again on `success`.
const Head = struct({ protocolId: t.u8, isRequest: t.bool });
const Request = message('Request', { callId: t.u32le, methodId: t.u32le, params: bytes('rest') });
const Success = struct({ callId: t.u32le, methodId: t.u32le, data: bytes('rest') });
const Failure = struct({ errorCode: t.u32le, callId: t.u32le });
const Response = select(message('Response', { success: t.bool }), 'success', {
  true: Success,
  false: Failure,
});
const Envelope = select(Head, 'isRequest', { true: Request, false: Response });

describe('select', () => {
  it('decodes each branch into one flat object, the named case setting type', () => {
    const req = Buffer.from('0a01' + '07000000' + '02000000' + 'beef', 'hex');
    expect(decode(Envelope, req)).toEqual({
      type: 'Request',
      protocolId: 10,
      isRequest: true,
      callId: 7,
      methodId: 2,
      params: Buffer.from('beef', 'hex'),
    });
    const ok = Buffer.from('0a00' + '01' + '07000000' + '02800000' + 'aa', 'hex');
    expect(Envelope.toJson(decode(Envelope, ok))).toEqual({
      type: 'Response',
      protocolId: 10,
      isRequest: false,
      success: true,
      callId: 7,
      methodId: 0x8002,
      data: 'aa',
    });
    const fail = Buffer.from('0a00' + '00' + '01000180' + '07000000', 'hex');
    const v = decode(Envelope, fail);
    expect(v).toMatchObject({ type: 'Response', success: false, errorCode: 0x80010001, callId: 7 });
    expect(encode(Envelope, v).equals(fail)).toBe(true);
  });

  it('round-trips bytes and JSON for every branch', () => {
    const arb = fc.oneof(
      fc.record({
        type: fc.constant('Request' as const),
        protocolId: fc.integer({ min: 0, max: 255 }),
        isRequest: fc.constant(true),
        callId: fc.nat(),
        methodId: fc.nat(),
        params: fc.uint8Array({ maxLength: 20 }).map((a) => Buffer.from(a)),
      }),
      fc.record({
        type: fc.constant('Response' as const),
        protocolId: fc.integer({ min: 0, max: 255 }),
        isRequest: fc.constant(false),
        success: fc.constant(false),
        errorCode: fc.nat(),
        callId: fc.nat(),
      }),
    );
    fc.assert(
      fc.property(arb, (value) => {
        const wire = encode(Envelope, value as Infer<typeof Envelope>);
        const back = decode(Envelope, wire);
        expect(back).toEqual(value);
        const json = Envelope.toJson(back);
        expect(encode(Envelope, Envelope.fromJson(JSON.parse(JSON.stringify(json)), '')).equals(wire)).toBe(
          true,
        );
      }),
    );
  });

  it('rejects JSON fields of the other branch and unknown fields, naming them', () => {
    const json = { type: 'Request', protocolId: 1, isRequest: true, callId: 1, methodId: 2, params: '' };
    expect(() => Envelope.fromJson({ ...json, errorCode: 3 }, '')).toThrow(/errorCode: unknown field/);
    expect(() => Envelope.fromJson({ ...json, isRequest: 1 }, '')).toThrow(EncodeError);
  });

  it('gives only DecodeError for arbitrary bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 24 }), (input) => {
        try {
          decode(Envelope, input);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
    );
  });

  it('reports a value with no case as ERR_BAD_VALUE at the selecting field', () => {
    const ByKind = select(struct({ kind: t.u8 }), 'kind', {
      1: struct({ a: t.u8 }),
      2: struct({ b: t.u16be }),
    });
    expect(decode(ByKind, Buffer.from('0207ff', 'hex'))).toEqual({ kind: 2, b: 0x07ff });
    const err = (() => {
      try {
        decode(ByKind, Buffer.from('0300', 'hex'));
      } catch (e) {
        return e as DecodeError;
      }
    })();
    expect(err).toBeInstanceOf(DecodeError);
    expect(err?.code).toBe('ERR_BAD_VALUE');
    expect(err?.path).toBe('kind');
    expect(err?.message).toMatch(/cases: 1, 2/);
  });

  it('exposes its structure to introspection', () => {
    const info = Envelope.info;
    if (info.kind !== 'select') throw new Error('not a select');
    expect(info.on).toBe('isRequest');
    expect(info.cases.map((c) => c.value)).toEqual(['true', 'false']);
    expect(info.cases[1]!.codec.info.kind).toBe('select');
  });

  it('refuses declarations that cannot work', () => {
    expect(() => select(Head, 'nope' as 'isRequest', { true: Request })).toThrow(DeclarationError);
    expect(() => select(Head, 'isRequest', { true: struct({ protocolId: t.u8 }) })).toThrow(
      /also in the head/,
    );
  });
});

describe('typed when predicates', () => {
  const Flags = message('Flags', {
    version: constant(t.u8, 1),
    flags: t.u8,
    kind: t.u8,
    position: when(is.allBits('flags', 0x01), t.u16be),
    name: when(is.and(is.anyBits('flags', 0x06), is.ne('kind', 0)), t.u8),
    extra: when(is.oneOf('kind', [2, 3]), t.u8),
    none: when(is.not(is.noBits('flags', 0x80)), t.u8),
  });

  it('decide presence from earlier fields, in both directions', () => {
    expect(decode(Flags, Buffer.from('01010000ff', 'hex'))).toEqual({
      type: 'Flags',
      flags: 1,
      kind: 0,
      position: 0xff,
      name: undefined,
      extra: undefined,
      none: undefined,
    });
    const v = decode(Flags, Buffer.from('01838203' + '05' + '06' + '07', 'hex').subarray(0, 7), {
      allowTrailing: true,
    });
    expect(v).toMatchObject({ flags: 0x83, kind: 0x82, position: 0x0305, name: 6, none: 7 });
    expect(encode(Flags, v).equals(Buffer.from('01838203050607', 'hex'))).toBe(true);
  });

  it('keep the condition as data for dissectors', () => {
    const info = Flags.info;
    if (info.kind !== 'struct') throw new Error('not a struct');
    expect(info.fields.find((f) => f.name === 'position')!.condition).toEqual({
      op: 'allBits',
      field: 'flags',
      mask: 1,
    });
    expect(info.fields.find((f) => f.name === 'extra')!.condition).toEqual({
      op: 'in',
      field: 'kind',
      values: [2, 3],
    });
  });

  it('must name an earlier, non-constant field', () => {
    expect(() => struct({ a: when(is.eq('b', 1), t.u8), b: t.u8 })).toThrow(/comes after it/);
    expect(() => struct({ v: constant(t.u8, 1), a: when(is.eq('v', 1), t.u8) })).toThrow(/constant/);
  });

  it('are typed by the fields they read', () => {
    const p = is.eq('kind', 2);
    expectTypeOf(p.test).parameter(0).toEqualTypeOf<{ kind: number }>();
    const typed = when((m: { flags: number }) => (m.flags & 1) !== 0, t.u8);
    expectTypeOf(typed.when).parameter(0).toEqualTypeOf<{ flags: number }>();
    // checkedFields accepts predicates that fit the struct's own fields.
    const ok = checkedFields({ flags: t.u8, x: when(is.allBits('flags', 1), t.u8) });
    expect(struct(ok).fields).toHaveLength(2);
    // @ts-expect-error: `flag` is not a field of this struct
    checkedFields({ flags: t.u8, x: when(is.allBits('flag', 1), t.u8) });
    // @ts-expect-error: `flags` is a string here, not a number
    checkedFields({ flags: bytes(1), x: when(is.allBits('flags', 1), t.u8) });
  });
});

describe('GamewireError', () => {
  it('is the base of the wire errors, each with a stable code', () => {
    const d = new DecodeError('ERR_INCOMPLETE', 'short', 3);
    const e = new EncodeError('ERR_BAD_INPUT', 'bad');
    const x = new DeclarationError('bad declaration');
    for (const err of [d, e, x]) {
      expect(err).toBeInstanceOf(GamewireError);
      expect(err).toBeInstanceOf(Error);
      expect(err.code).toMatch(/^ERR_[A-Z0-9_]+$/);
    }
    expect(x.code).toBe('ERR_BAD_DECLARATION');
    expect(d.name).toBe('DecodeError');
  });
});
