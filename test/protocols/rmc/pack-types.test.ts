/**
 * The pack types the real Splinter Cell: Blacklist DDL needed: `buffertail` (DynamicData's body)
 * and AnyDataHolders whose structure is a class of the pack (UbiAuthenticationLoginCustomData in
 * TicketGranting::LoginEx), shown by name. Round trips byte for byte, and arbitrary bytes give
 * typed errors only.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeStream, encodeJson } from '../../../src/protocols/rmc/codec.js';
import { importDdl } from '../../../src/protocols/rmc/ddl/import.js';
import { bufferTail, type ProtocolPack, packProtocols } from '../../../src/protocols/rmc/ddl/pack.js';
import { DecodeError, decode, encode, WireWriter } from '../../../src/wire/index.js';

const PACK: ProtocolPack = {
  format: 'gamewire-rmc-pack',
  version: 1,
  sources: ['test'],
  types: {
    Data: { base: null, fields: [] },
    DynamicData: { base: 'Data', fields: [{ name: 'm_bufTail', type: 'bufferTail' }] },
    LoginData: {
      base: 'Data',
      fields: [
        { name: 'm_userName', type: 'qString' },
        { name: 'm_password', type: 'qString' },
      ],
    },
    Wrapper: { base: 'Data', fields: [{ name: 'm_inner', type: 'anyDataHolder' }] },
  },
  protocols: [
    {
      name: 'AuthProtocol',
      id: 10,
      doc: '',
      methods: [
        {
          name: 'LoginEx',
          id: 2,
          args: [
            { name: 'strUserName', type: 'qString' },
            { name: 'oExtraData', type: 'anyDataHolder' },
          ],
          results: [{ name: 'retval', type: 'qResult' }],
        },
        { name: 'Blob', id: 3, args: [{ name: 'tail', type: 'bufferTail' }], results: [] },
      ],
    },
  ],
  problems: [],
};

const protocols = packProtocols(PACK);
const LOGIN = protocols[0]!.byName.get('LoginEx')!;
const BLOB = protocols[0]!.byName.get('Blob')!;

/** A classic request's bytes around `args`. */
function request(methodId: number, args: Buffer): Buffer {
  const head = Buffer.alloc(13);
  head[4] = 10 | 0x80;
  head.writeUInt32LE(7, 5);
  head.writeUInt32LE(methodId, 9);
  const msg = Buffer.concat([head, args]);
  msg.writeUInt32LE(msg.length - 4, 0);
  return msg;
}

function qs(s: string): Buffer {
  const b = Buffer.from(`${s}\0`);
  const out = Buffer.alloc(2 + b.length);
  out.writeUInt16LE(b.length, 0);
  b.copy(out, 2);
  return out;
}

function holder(typeName: string, data: Buffer): Buffer {
  const lens = Buffer.alloc(8);
  lens.writeUInt32LE(data.length + 4, 0);
  lens.writeUInt32LE(data.length, 4);
  return Buffer.concat([qs(typeName), lens, data]);
}

describe('buffertail', () => {
  it('round-trips any bytes as the rest of what holds it', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (raw) => {
        const b = Buffer.from(raw);
        const v = decode(bufferTail, b);
        expect(v.equals(b)).toBe(true);
        expect(encode(bufferTail, v).equals(b)).toBe(true);
        expect(bufferTail.fromJson(bufferTail.toJson(v), '').equals(b)).toBe(true);
      }),
    );
  });

  it('is imported from the DDL (no problem reported) and reads to the end of an AnyDataHolder', () => {
    const ptype = (name: string) => ({
      __class__: 'PType',
      type: { __class__: 'SimpleType', name },
      unknown: 1,
    });
    const pack = importDdl(
      [
        {
          file: 'x.json',
          json: {
            __class__: 'Namespace',
            elements: [
              {
                __class__: 'ClassDeclaration',
                name1: 'DynamicData',
                name2: 'DynamicData',
                namespace: 'T',
                properties: [],
                maybe_base: 'Data',
                variables: [
                  {
                    __class__: 'Variable',
                    name1: 'm_bufTail',
                    name2: 'm_bufTail',
                    type: ptype('buffertail'),
                  },
                ],
              },
            ],
          },
        },
      ],
      {},
    );
    expect(pack.problems).toEqual([]);
    expect(pack.types.DynamicData!.fields).toEqual([{ name: 'm_bufTail', type: 'bufferTail' }]);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.string({ maxLength: 12 }), (raw, user) => {
        const bytes = request(2, Buffer.concat([qs(user), holder('DynamicData', Buffer.from(raw))]));
        const [json] = decodeStream(bytes, 'classic', protocols) as any[];
        expect(json.args.oExtraData).toEqual({
          typeName: 'DynamicData',
          data: { m_bufTail: Buffer.from(raw).toString('hex') },
        });
        const w = new WireWriter();
        encodeJson(json, 'classic', w, '', protocols);
        expect(w.toBuffer().equals(bytes)).toBe(true);
      }),
    );
  });

  it('as a method’s last parameter takes the rest of the message', () => {
    const bytes = request(3, Buffer.from('00010203', 'hex'));
    const [json] = decodeStream(bytes, 'classic', protocols) as any[];
    expect(json.args).toEqual({ tail: '00010203' });
    expect(BLOB.args.info.kind).toBe('struct');
  });
});

describe('AnyDataHolder of a pack class', () => {
  it('shows the structure by name and writes back the same bytes, nested holders too', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 20 }), fc.string({ maxLength: 20 }), fc.boolean(), (u, p, nest) => {
        const login = holder('LoginData', Buffer.concat([qs(u), qs(p)]));
        const extra = nest ? holder('Wrapper', login) : login;
        const bytes = request(2, Buffer.concat([qs('who'), extra]));
        const [json] = decodeStream(bytes, 'classic', protocols) as any[];
        const inner = { typeName: 'LoginData', data: { m_userName: u, m_password: p } };
        expect(json.args.oExtraData).toEqual(
          nest ? { typeName: 'Wrapper', data: { m_inner: inner } } : inner,
        );
        // Typed JSON encodes back to the same bytes.
        const w = new WireWriter();
        encodeJson(JSON.parse(JSON.stringify(json)), 'classic', w, '', protocols);
        expect(w.toBuffer().equals(bytes)).toBe(true);
      }),
    );
  });

  it('keeps the bytes as hex for a name no class has, or bytes the class does not read exactly', () => {
    const unknown = holder('Nobody', Buffer.from('abcd', 'hex'));
    const short = holder('LoginData', Buffer.concat([qs('a'), qs('b'), Buffer.from([9])]));
    for (const h of [unknown, short]) {
      const bytes = request(2, Buffer.concat([qs('who'), h]));
      const [json] = decodeStream(bytes, 'classic', protocols) as any[];
      expect(typeof json.args.oExtraData.data).toBe('string');
      const w = new WireWriter();
      encodeJson(json, 'classic', w, '', protocols);
      expect(w.toBuffer().equals(bytes)).toBe(true);
    }
    // Typed data for a name that is no class is refused with a typed error.
    expect(() =>
      encodeJson(
        {
          type: 'request',
          protocolId: 10,
          callId: 1,
          methodId: 2,
          args: { strUserName: 'x', oExtraData: { typeName: 'Nobody', data: {} } },
        },
        'classic',
        new WireWriter(),
        '',
        protocols,
      ),
    ).toThrow(/no class of the pack/);
  });

  it('arbitrary bytes give only typed errors', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (raw) => {
        for (const codec of [LOGIN.args, BLOB.args]) {
          try {
            decode(codec, Buffer.from(raw));
          } catch (e) {
            expect(e).toBeInstanceOf(DecodeError);
          }
        }
        // Through the envelope: typed or hex, never a crash.
        expect(() => decodeStream(request(2, Buffer.from(raw)), 'classic', protocols)).not.toThrow();
      }),
      { numRuns: 500 },
    );
  });
});
