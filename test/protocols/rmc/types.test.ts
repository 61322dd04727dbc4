import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  anyDataHolder,
  bool,
  buffer16,
  buffer32,
  ClassVersion,
  classicPacket,
  type DateTime,
  dateTime,
  dateTimeFromDate,
  dateTimeToDate,
  double,
  float,
  formatStationUrl,
  hyperscapePacket,
  i8,
  i16,
  i32,
  i64,
  list,
  map,
  nexVerbosePacket,
  parseStationUrl,
  qResult,
  qString,
  rmcCodec,
  stationUrl,
  u8,
  u16,
  u32,
  u64,
  uuid,
  uuidToString,
  variant,
} from '../../../src/protocols/rmc/index.js';
import { type Codec, DecodeError, decode, encode } from '../../../src/wire/index.js';

const RUNS = { numRuns: 200 };

/** encode -> decode gives the value back, and re-encoding gives the same bytes; JSON too. */
function roundTrips<T>(codec: Codec<T>, arb: fc.Arbitrary<T>): void {
  fc.assert(
    fc.property(arb, (v) => {
      const bytes = encode(codec, v);
      const back = decode(codec, bytes);
      expect(back).toEqual(v);
      expect(encode(codec, back).equals(bytes)).toBe(true);
      const json = JSON.parse(JSON.stringify(codec.toJson(back)));
      expect(encode(codec, codec.fromJson(json, '')).equals(bytes)).toBe(true);
    }),
    RUNS,
  );
}

/** Arbitrary bytes either decode or throw DecodeError, nothing else. */
function onlyDecodeErrors(codec: Codec<unknown>): void {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      try {
        decode(codec, bytes);
      } catch (e) {
        expect(e).toBeInstanceOf(DecodeError);
        // decode() turns any throwable into ERR_INTERNAL: that must never be what comes out.
        expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
      }
    }),
    { numRuns: 300 },
  );
}

const text = fc.string({ unit: 'grapheme', maxLength: 40 }).filter((s) => !s.includes('\0'));
const buf = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
const dateTimeArb: fc.Arbitrary<DateTime> = fc.record({
  year: fc.integer({ min: 0, max: 2 ** 38 - 1 }),
  month: fc.integer({ min: 0, max: 15 }),
  day: fc.integer({ min: 0, max: 31 }),
  hour: fc.integer({ min: 0, max: 31 }),
  minute: fc.integer({ min: 0, max: 63 }),
  second: fc.integer({ min: 0, max: 63 }),
});

const cases: [string, Codec<any>, fc.Arbitrary<any>][] = [
  ['String', qString, text],
  ['Buffer (u16, NEX qBuffer)', buffer16, buf(300)],
  ['Buffer32 (u32, NEX Buffer)', buffer32, buf(300)],
  ['List<String>', list(qString), fc.array(text, { maxLength: 8 })],
  [
    'Map<String,u32>',
    map(qString, u32),
    fc.array(fc.record({ key: text, value: fc.nat({ max: 0xffffffff }) }), { maxLength: 6 }),
  ],
  ['bool', bool, fc.boolean()],
  ['u8', u8, fc.integer({ min: 0, max: 0xff })],
  ['i8', i8, fc.integer({ min: -128, max: 127 })],
  ['u16', u16, fc.integer({ min: 0, max: 0xffff })],
  ['i16', i16, fc.integer({ min: -32768, max: 32767 })],
  ['u32', u32, fc.nat({ max: 0xffffffff })],
  ['i32', i32, fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })],
  ['u64', u64, fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })],
  ['i64', i64, fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n })],
  ['float', float, fc.float({ noNaN: true })],
  ['double', double, fc.double({ noNaN: true })],
  ['DateTime', dateTime, dateTimeArb],
  ['UUID', uuid, fc.uint8Array({ minLength: 16, maxLength: 16 }).map((a) => Buffer.from(a))],
  ['StationURL', stationUrl, text],
  [
    'Variant',
    variant,
    fc.oneof(
      fc.constant({ kind: 'none' }),
      fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map((value) => ({ kind: 'int64', value })),
      fc.double({ noNaN: true }).map((value) => ({ kind: 'double', value })),
      fc.boolean().map((value) => ({ kind: 'bool', value })),
      text.map((value) => ({ kind: 'string', value })),
      dateTimeArb.map((value) => ({ kind: 'datetime', value })),
      fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((value) => ({ kind: 'uint64', value })),
    ),
  ],
  ['AnyDataHolder', anyDataHolder, fc.record({ typeName: text, data: buf(64) })],
  ['qResult', qResult, fc.nat({ max: 0xffffffff })],
  ['ClassVersion', ClassVersion, fc.record({ name: text, version: fc.integer({ min: 0, max: 0xffff }) })],
];

describe('RMC data types: property round trips', () => {
  for (const [name, codec, arb] of cases) {
    it(`${name} round-trips (bytes and JSON)`, () => roundTrips(codec, arb));
    it(`${name}: arbitrary bytes give a value or a DecodeError`, () => onlyDecodeErrors(codec));
  }
});

describe('RMC data types: layouts', () => {
  it('String counts the NUL in its u16 length', () => {
    expect(encode(qString, 'LoginProtocol').toString('hex')).toBe('0e004c6f67696e50726f746f636f6c00');
  });

  it('Buffer16 is a u16 length, Buffer32 a u32 length (the qBuffer/Buffer naming trap)', () => {
    expect(encode(buffer16, Buffer.from([1, 2, 4, 5])).toString('hex')).toBe('040001020405');
    expect(encode(buffer32, Buffer.from([1, 2, 4, 5])).toString('hex')).toBe('0400000001020405');
  });

  it('DateTime packs sec | min<<6 | hour<<12 | day<<17 | month<<22 | year<<26', () => {
    const d = { year: 2020, month: 9, day: 13, hour: 12, minute: 34, second: 56 };
    const expected = 56n | (34n << 6n) | (12n << 12n) | (13n << 17n) | (9n << 22n) | (2020n << 26n);
    expect(encode(dateTime, d).readBigUInt64LE(0)).toBe(expected);
    expect(dateTimeToDate(d).toISOString()).toBe('2020-09-13T12:34:56.000Z');
    expect(dateTimeFromDate(new Date('2020-09-13T12:34:56Z'))).toEqual(d);
  });

  it('DateTime rejects fields that do not fit their bits', () => {
    expect(() =>
      dateTime.fromJson({ year: 1, month: 16, day: 1, hour: 0, minute: 0, second: 0 }, ''),
    ).toThrow(/month/);
  });

  it('Variant is a u8 type then the value', () => {
    expect(encode(variant, { kind: 'string', value: 'a' }).toString('hex')).toBe('0402006100');
    expect(encode(variant, { kind: 'none' }).toString('hex')).toBe('00');
    expect(() => decode(variant, Buffer.from([7]))).toThrow(/unknown Variant type 7/);
  });

  it('AnyDataHolder lengths must agree', () => {
    const good = encode(anyDataHolder, { typeName: 'X', data: Buffer.from([1, 2]) });
    expect(good.toString('hex')).toBe('02005800' + '06000000' + '02000000' + '0102');
    const bad = Buffer.from(good);
    bad.writeUInt32LE(7, 4);
    expect(() => decode(anyDataHolder, bad)).toThrow(expect.objectContaining({ code: 'ERR_BAD_LENGTH' }));
  });

  it('StationURL parses and formats prudp:/address=…;port=…;sid=…', () => {
    const p = parseStationUrl('prudp:/address=000.000.00.000;port=9103;sid=15');
    expect(p.scheme).toBe('prudp');
    expect([...p.params]).toEqual([
      ['address', '000.000.00.000'],
      ['port', '9103'],
      ['sid', '15'],
    ]);
    expect(formatStationUrl(p)).toBe('prudp:/address=000.000.00.000;port=9103;sid=15');
    expect(formatStationUrl({ scheme: 'prudp', params: { address: '1.2.3.4', port: 1 } })).toBe(
      'prudp:/address=1.2.3.4;port=1',
    );
    expect(parseStationUrl('prudp:/').params.size).toBe(0);
    expect(() => parseStationUrl('nonsense')).toThrow(DecodeError);
  });

  it('StationURL parse/format round-trips generated URLs', () => {
    const key = fc.stringMatching(/^[a-zA-Z][a-zA-Z0-9]{0,8}$/);
    const value = fc.stringMatching(/^[a-zA-Z0-9.]{0,12}$/);
    fc.assert(
      fc.property(fc.uniqueArray(fc.tuple(key, value), { selector: (t) => t[0], maxLength: 6 }), (pairs) => {
        const url = formatStationUrl({ scheme: 'prudp', params: new Map(pairs) });
        expect([...parseStationUrl(url).params]).toEqual(pairs);
        expect(formatStationUrl(parseStationUrl(url))).toBe(url);
      }),
      RUNS,
    );
  });

  it('uuidToString writes the first three fields little-endian', () => {
    const b = Buffer.from('00112233445566778899aabbccddeeff', 'hex');
    expect(uuidToString(b)).toBe('33221100-5544-7766-8899-aabbccddeeff');
  });
});

describe('RMC packets: property round trips', () => {
  const u32a = fc.nat({ max: 0xffffffff });
  const cv = fc.array(fc.record({ name: text, version: fc.integer({ min: 0, max: 0xffff }) }), {
    maxLength: 3,
  });
  const verbose = fc.oneof(
    fc.record({
      type: fc.constant('request'),
      protocol: text,
      callId: u32a,
      method: text,
      classVersions: cv,
      args: buf(40),
    }),
    fc.record({
      type: fc.constant('response'),
      protocol: text,
      callId: u32a,
      method: text,
      results: buf(40),
    }),
  );
  const hyperscapeArb = fc.oneof(
    verbose,
    fc.record({
      type: fc.constant('error'),
      protocol: text,
      namespace: text,
      code: fc.integer({ min: 0, max: 0xffff }),
      callId: u32a,
    }),
  );
  const nexArb = fc.oneof(
    verbose,
    fc.record({ type: fc.constant('error'), protocol: text, errorCode: u32a, callId: u32a }),
  );
  const pid = fc.integer({ min: 0, max: 0xffff });
  const classicArb = fc.oneof(
    fc.record({ type: fc.constant('request'), protocolId: pid, callId: u32a, methodId: u32a, args: buf(40) }),
    fc.record({
      type: fc.constant('response'),
      protocolId: pid,
      callId: u32a,
      methodId: fc.integer({ min: 0, max: 0x7fff }),
      results: buf(40),
    }),
    fc.record({ type: fc.constant('error'), protocolId: pid, errorCode: u32a, callId: u32a }),
  );

  it('HyperScape packets round-trip', () => roundTrips(hyperscapePacket as Codec<any>, hyperscapeArb));
  it('nex-verbose packets round-trip', () => roundTrips(nexVerbosePacket as Codec<any>, nexArb));
  it('classic packets round-trip', () => roundTrips(classicPacket as Codec<any>, classicArb));

  it('the CLI codec round-trips streams of packets through JSON, per variant', () => {
    fc.assert(
      fc.property(fc.array(hyperscapeArb, { minLength: 1, maxLength: 4 }), (msgs) => {
        const bytes = Buffer.concat(msgs.map((m) => encode(hyperscapePacket as Codec<any>, m)));
        const json = JSON.parse(JSON.stringify(rmcCodec.decode(bytes, {})));
        expect(rmcCodec.encode(json, {}).equals(bytes)).toBe(true);
      }),
      RUNS,
    );
    fc.assert(
      fc.property(classicArb, (m) => {
        const bytes = encode(classicPacket as Codec<any>, m);
        expect(
          rmcCodec
            .encode(rmcCodec.decode(bytes, { variant: 'classic' }), { variant: 'classic' })
            .equals(bytes),
        ).toBe(true);
      }),
      RUNS,
    );
  });

  for (const variantName of ['hyperscape', 'classic', 'nex-verbose']) {
    it(`${variantName}: arbitrary bytes give packets or a DecodeError, nothing else`, () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 96 }), (bytes) => {
          try {
            rmcCodec.decode(Buffer.from(bytes), { variant: variantName });
          } catch (e) {
            expect(e).toBeInstanceOf(DecodeError);
            expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
          }
        }),
        { numRuns: 500 },
      );
    });
  }

  it('mutated seed packets give packets or a DecodeError, nothing else', () => {
    const seed = encode(hyperscapePacket as Codec<any>, {
      type: 'request',
      protocol: 'LoginProtocol',
      callId: 6,
      method: 'LoginProtocol::Register_V1',
      classVersions: [],
      args: encode(list(stationUrl), ['prudp:/address=1.2.3.4;port=9103;sid=15']),
    });
    fc.assert(
      fc.property(fc.nat({ max: seed.length - 1 }), fc.integer({ min: 0, max: 255 }), (at, byte) => {
        const b = Buffer.from(seed);
        b[at] = byte;
        try {
          rmcCodec.decode(b, {});
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 1000 },
    );
  });
});
