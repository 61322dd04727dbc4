/**
 * Byte-exact fixtures from the VC:MP RPC specification, §7 (annotated hex examples A–K and the
 * malformed-input table), checked through the decoder, the encoder and the Squirrel-style builder.
 */
import { describe, expect, it } from 'vitest';
import {
  createRpc,
  decodeServerData,
  encodePacket,
  encodeServerData,
  float,
  Quaternion,
  type RpcCall,
  type ServerData,
  ServerDataCodec,
  Vector,
} from '../../../src/protocols/vcmp-rpc/index.js';
import { DecodeError, parseHex } from '../../../src/wire/index.js';

const hex = (s: string) => parseHex(s);

function decodeError(fn: () => unknown): DecodeError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(DecodeError);
    return e as DecodeError;
  }
  throw new Error('expected a DecodeError');
}

const EXAMPLES = {
  A: '00 00 00 40 46 00 00 00 0f 00 05 70 72 69 6e 74 73 00 05 48 65 6c 6c 6f',
  B: '01 00 00 40 46 00 00 00 0f 00 05 70 72 69 6e 74 73 00 05 48 65 6c 6c 6f',
  C: '01 00 00 40 46 00 00 00 1d 00 02 66 6e 6f 69 01 00 00 00 69 fe ff ff ff 66 00 00 c0 3f 62 01 62 00 73 00 02 61 62',
  D: '01 00 00 40 46 00 00 00 26 00 06 53 65 74 50 6f 73 76 00 00 80 3f 00 00 00 40 00 00 40 40 71 00 00 00 00 00 00 00 00 00 00 00 00 00 00 80 3f',
  E: '01 00 00 40 46 00 00 00 1e 00 02 66 6e 61 00 00 00 15 69 01 00 00 00 73 00 01 78 61 00 00 00 02 62 01 61 00 00 00 00',
  F: '01 00 00 40 47 00 00 00 21 46 00 00 00 1c 00 0d 63 6f 6d 70 69 6c 65 73 74 72 69 6e 67 73 00 0a 70 72 69 6e 74 28 35 30 30 29',
  G: '01 00 00 40 46 00 00 00 1e 00 05 70 72 69 6e 74 46 00 00 00 12 00 06 66 6f 72 6d 61 74 73 00 02 25 64 69 05 00 00 00',
  H: '01 00 00 40 45 00 00 00 0d 00 03 6c 65 6e 73 00 05 68 65 6c 6c 6f',
  I: '01 00 00 40 47 00 00 00 17 47 00 00 00 0d 46 00 00 00 03 00 01 61 69 01 00 00 00 66 00 00 00 40',
  J: '01 00 00 40 68 00 00 00 0f 73 00 07 67 72 61 76 69 74 79 66 00 00 00 3f',
  K: '01 00 00 40 46 00 00 00 1e 00 05 70 72 69 6e 74 67 00 00 00 12 73 00 09 53 6f 6d 65 54 61 62 6c 65 73 00 03 6b 65 79',
} as const;

describe('spec §7 examples decode and re-encode byte for byte', () => {
  for (const [name, text] of Object.entries(EXAMPLES)) {
    it(`example ${name}`, () => {
      const bytes = hex(text);
      const packet = decodeServerData(bytes);
      expect(encodePacket(packet)).toEqual(bytes);
      // Through the CLI's JSON form as well.
      const json = JSON.parse(JSON.stringify(ServerDataCodec.toJson(packet)));
      expect(encodePacket(ServerDataCodec.fromJson(json, '') as ServerData)).toEqual(bytes);
    });
  }

  it('A (the wiki seed, legacy identifier) is print("Hello")', () => {
    expect(decodeServerData(hex(EXAMPLES.A))).toEqual({
      type: 'ServerData',
      identifier: 0x40000000,
      item: { type: 'call', tag: 'F', name: 'print', args: [{ type: 'string', value: 'Hello' }] },
    });
  });

  it('C decodes every scalar with its byte order', () => {
    const p = decodeServerData(hex(EXAMPLES.C));
    expect(p.identifier).toBe(0x40000001);
    expect(p.item).toEqual({
      type: 'call',
      tag: 'F',
      name: 'fn',
      args: [
        { type: 'null' },
        { type: 'int', value: 1 },
        { type: 'int', value: -2 },
        { type: 'float', value: 1.5 },
        { type: 'bool', value: true },
        { type: 'bool', value: false },
        { type: 'string', value: 'ab' },
      ],
    });
  });

  it('F and I nest calls as callees; G nests a call as an argument; K carries a get', () => {
    const f = decodeServerData(hex(EXAMPLES.F)).item;
    expect(f).toMatchObject({ tag: 'G', callee: { tag: 'F', name: 'compilestring' }, args: [] });
    const i = decodeServerData(hex(EXAMPLES.I)).item;
    expect(i).toMatchObject({
      tag: 'G',
      callee: { tag: 'G', callee: { tag: 'F', name: 'a', args: [] }, args: [{ type: 'int', value: 1 }] },
      args: [{ type: 'float', value: 2 }],
    });
    const g = decodeServerData(hex(EXAMPLES.G)).item;
    expect(g).toMatchObject({ tag: 'F', name: 'print', args: [{ type: 'call', tag: 'F', name: 'format' }] });
    const k = decodeServerData(hex(EXAMPLES.K), { from: 'client' }).item;
    expect(k).toMatchObject({ args: [{ type: 'get', path: [{ value: 'SomeTable' }, { value: 'key' }] }] });
  });
});

describe('the builder writes what the server plugin writes', () => {
  const { F, RFC, RFCa, Z, S } = createRpc();
  const legacy = createRpc({ legacy: true });

  it('A: legacy RFC("print")("Hello")', () => {
    expect(legacy.RFC('print')('Hello')).toEqual(hex(EXAMPLES.A));
  });
  it('B: current RFC("print")("Hello")', () => {
    expect(RFC('print')('Hello')).toEqual(hex(EXAMPLES.B));
  });
  it('C: every scalar', () => {
    expect(RFC('fn')(null, 1, -2, 1.5, true, false, 'ab')).toEqual(hex(EXAMPLES.C));
  });
  it('D: Vector and Quaternion', () => {
    expect(RFC('SetPos')(new Vector(1, 2, 3), new Quaternion(0, 0, 0, 1))).toEqual(hex(EXAMPLES.D));
  });
  it('E: nested arrays', () => {
    expect(RFC('fn')([1, 'x', [true], []])).toEqual(hex(EXAMPLES.E));
  });
  it('F: RFC(F("compilestring")("print(500)"))()', () => {
    expect(RFC(F('compilestring')('print(500)'))()).toEqual(hex(EXAMPLES.F));
  });
  it('G: a call as an argument', () => {
    expect(RFC('print')(F('format')('%d', 5))).toEqual(hex(EXAMPLES.G));
  });
  it('H: RFCa("len")("hello")', () => {
    expect(RFCa('len')('hello')).toEqual(hex(EXAMPLES.H));
  });
  it('I: G of G with a float forced for 2.0', () => {
    expect(RFC(F(F('a')())(1))(float(2))).toEqual(hex(EXAMPLES.I));
  });
  it('J: S("gravity", 0.5)', () => {
    expect(S('gravity', 0.5)).toEqual(hex(EXAMPLES.J));
  });
  it('K: RFC("print")(Z("SomeTable","key"))', () => {
    expect(RFC('print')(Z('SomeTable', 'key'))).toEqual(hex(EXAMPLES.K));
  });
  it('rejects tables like the plugin does', () => {
    expect(() => RFC('fn')({ a: 1 } as never)).toThrow(/Unknown type of parameter/);
  });
  it('rejects packets over 4095 bytes, and allows a raised limit', () => {
    const big = 'x'.repeat(5000);
    expect(() => RFC('print')(big)).toThrow(/exceeds the limit of 4095/);
    expect(createRpc({ maxPacketBytes: 8192 }).RFC('print')(big).length).toBe(4 + 5 + 2 + 5 + 3 + 5000);
  });
  it('rejects strings over 65535 bytes instead of wrapping the length', () => {
    expect(() => createRpc({ maxPacketBytes: 1e6 }).RFC('print')('y'.repeat(70_000))).toThrow(/65535/);
  });
  it('wraps uint32 ints into the 4-byte slot', () => {
    expect(RFC('f')(0xffffffff)).toEqual(hex('01 00 00 40 46 00 00 00 08 00 01 66 69 ff ff ff ff'));
  });
  it('can reuse one buffer for every packet', () => {
    const reusing = createRpc({ reuseBuffer: true });
    const first = Buffer.from(reusing.RFC('print')('Hello'));
    expect(first).toEqual(hex(EXAMPLES.B));
    expect(reusing.RFC('print')('Hello')).toEqual(first);
  });
});

describe('malformed input (spec §7 table) gives typed errors in strict mode', () => {
  it('unknown tag x', () => {
    const e = decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 04 00 01 66 78')));
    expect(e.code).toBe('ERR_UNKNOWN_TYPE');
    expect(e.offset).toBe(12);
    expect(e.path).toBe('item.args[0]');
  });
  it('bool byte 2', () => {
    const e = decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 05 00 01 66 62 02')));
    expect(e.code).toBe('ERR_BAD_VALUE');
    expect(e.offset).toBe(13);
  });
  it('size larger than the data is incomplete', () => {
    expect(decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 ff 00 01 66'))).code).toBe(
      'ERR_INCOMPLETE',
    );
  });
  it('bytes after the declared size are trailing bytes', () => {
    const e = decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 03 00 01 66 69 07 00 00 00')));
    expect(e.code).toBe('ERR_TRAILING_BYTES');
    expect(e.offset).toBe(12);
  });
  it('an array longer than its parent overruns', () => {
    const e = decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 08 00 01 66 61 00 00 00 09')));
    expect(e.code).toBe('ERR_OVERRUN');
  });
  it('an unknown identifier', () => {
    expect(decodeError(() => decodeServerData(hex('02 00 00 40 46 00 00 00 03 00 01 66'))).code).toBe(
      'ERR_BAD_VALUE',
    );
  });
  it('input shorter than the identifier', () => {
    expect(decodeError(() => decodeServerData(hex('01 00')))).toMatchObject({
      code: 'ERR_INCOMPLETE',
      offset: 0,
    });
  });
  it('a string running past its call item', () => {
    const e = decodeError(() =>
      decodeServerData(hex('01 00 00 40 46 00 00 00 06 00 01 66 73 00 05 41 42 43 44 45')),
    );
    expect(e.code).toBe('ERR_OVERRUN');
  });
  it('a name running past its call item', () => {
    expect(decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 03 00 05 66 6e')))).toMatchObject({
      code: 'ERR_OVERRUN',
      path: 'item.name',
    });
  });
  it('E or D without the environment argument', () => {
    expect(decodeError(() => decodeServerData(hex('01 00 00 40 45 00 00 00 05 00 03 6c 65 6e'))).code).toBe(
      'ERR_BAD_VALUE',
    );
  });
  it('a G whose callee is not a call item', () => {
    expect(decodeError(() => decodeServerData(hex('01 00 00 40 47 00 00 00 05 69 01 00 00 00'))).code).toBe(
      'ERR_BAD_VALUE',
    );
  });
  it('a top-level value that is not a call', () => {
    expect(decodeError(() => decodeServerData(hex('01 00 00 40 69 01 00 00 00'))).code).toBe('ERR_BAD_VALUE');
  });
  it('g and h are refused in the server→NPC direction', () => {
    expect(decodeError(() => decodeServerData(hex(EXAMPLES.J), { from: 'server' })).code).toBe(
      'ERR_UNKNOWN_TYPE',
    );
    expect(decodeError(() => decodeServerData(hex(EXAMPLES.K), { from: 'server' })).code).toBe(
      'ERR_UNKNOWN_TYPE',
    );
  });
  it('packets over 4095 bytes, before parsing', () => {
    const big = Buffer.alloc(4096);
    expect(decodeError(() => decodeServerData(big))).toMatchObject({ code: 'ERR_TOO_LARGE', offset: 0 });
  });
  it('nesting deeper than the limit (default 32)', () => {
    // 40 arrays in arrays: 61 <len> … innermost empty.
    let inner = Buffer.from('6100000000', 'hex');
    for (let i = 0; i < 40; i++) {
      const head = Buffer.alloc(5);
      head[0] = 0x61;
      head.writeUInt32BE(inner.length, 1);
      inner = Buffer.concat([head, inner]);
    }
    const body = Buffer.concat([hex('00 01 66'), inner]);
    const head = Buffer.alloc(9);
    head.writeUInt32LE(0x40000001, 0);
    head[4] = 0x46;
    head.writeUInt32BE(body.length, 5);
    const packet = Buffer.concat([head, body]);
    expect(decodeError(() => decodeServerData(packet)).code).toBe('ERR_TOO_DEEP');
    expect(decodeServerData(packet, { maxDepth: 64 }).item.type).toBe('call');
  });
  it('invalid UTF-8 in a string is rejected strictly and read lossily in lenient mode', () => {
    const bytes = hex('01 00 00 40 46 00 00 00 07 00 01 66 73 00 01 ff');
    expect(decodeError(() => decodeServerData(bytes)).code).toBe('ERR_BAD_STRING');
    expect(decodeServerData(bytes, { lenient: true }).item).toMatchObject({
      args: [{ type: 'string', value: '\ufffd' }],
    });
  });
});

describe('lenient mode reproduces the C++ reader (spec §6)', () => {
  it('trailing bytes after the top-level size become arguments', () => {
    const p = decodeServerData(hex('01 00 00 40 46 00 00 00 03 00 01 66 69 07 00 00 00'), { lenient: true });
    expect(p.item).toEqual({ type: 'call', tag: 'F', name: 'f', args: [{ type: 'int', value: 7 }] });
  });
  it('an array longer than the data, as a call argument, fails the call as the real plugin does', () => {
    // F "f" with an array claiming 9 bytes, followed by an int: the C++ pushes nothing for the
    // array but still counts it as an argument, so the call fails.
    const e = decodeError(() =>
      decodeServerData(hex('01 00 00 40 46 00 00 00 08 00 01 66 61 00 00 00 09 69 05 00 00 00'), {
        lenient: true,
      }),
    );
    expect(e.code).toBe('ERR_BAD_LENGTH');
    expect(e.offset).toBe(12);
  });
  it('E without arguments is accepted (the executor then fails)', () => {
    expect(
      decodeServerData(hex('01 00 00 40 45 00 00 00 05 00 03 6c 65 6e'), { lenient: true }).item,
    ).toMatchObject({
      tag: 'E',
      args: [],
    });
  });
  it('still rejects an unknown tag and a bad bool, like the C++', () => {
    expect(
      decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 04 00 01 66 78'), { lenient: true }))
        .code,
    ).toBe('ERR_UNKNOWN_TYPE');
    expect(
      decodeError(() => decodeServerData(hex('01 00 00 40 46 00 00 00 05 00 01 66 62 02'), { lenient: true }))
        .code,
    ).toBe('ERR_BAD_VALUE');
  });
});

describe('encoder rules', () => {
  it('writes the legacy identifier only when asked', () => {
    const item: RpcCall = {
      type: 'call',
      tag: 'F',
      name: 'print',
      args: [{ type: 'string', value: 'Hello' }],
    };
    expect(encodeServerData(item)).toEqual(hex(EXAMPLES.B));
    expect(encodeServerData(item, { legacy: true })).toEqual(hex(EXAMPLES.A));
  });
  it('refuses ints outside int32/uint32', () => {
    expect(() =>
      encodeServerData({ type: 'call', tag: 'F', name: 'f', args: [{ type: 'int', value: 2 ** 32 }] }),
    ).toThrow(/int32 or uint32/);
  });
});
