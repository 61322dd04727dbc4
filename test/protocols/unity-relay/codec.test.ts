import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  bindHmac,
  createBind,
  decodeAll,
  decodeMessage,
  encodeMessage,
  MessageType,
  RelayFrame,
  type RelayMessage,
  RelayMessages,
  unityRelayCodec,
} from '../../../src/protocols/unity-relay/index.js';
import { DecodeError } from '../../../src/wire/errors.js';
import {
  mockAllocationId,
  UNITY_ACCEPTED_HEX,
  UNITY_BIND_HEX,
  UNITY_BIND_HMAC_HEX,
  UNITY_BIND_RECEIVED_HEX,
  UNITY_CONNECT_REQUEST_HEX,
  UNITY_CONNECTION_DATA,
  UNITY_DISCONNECT_HEX,
  UNITY_ERROR_1_HEX,
  UNITY_ERROR_4_HEX,
  UNITY_KEY,
  UNITY_PING_HEX,
  UNITY_RELAY_HEX,
} from './fixtures.js';

const hex = (s: string) => Buffer.from(s, 'hex');

function decodeError(bytes: Buffer): DecodeError {
  try {
    decodeMessage(bytes);
  } catch (e) {
    expect(e).toBeInstanceOf(DecodeError);
    return e as DecodeError;
  }
  throw new Error('decoded without error');
}

describe('unity-relay codec against the real client byte arrays', () => {
  it('BIND with nonce 23: 295 bytes, little-endian nonce, Unity HMAC', () => {
    const bytes = hex(UNITY_BIND_HEX);
    expect(bytes.length).toBe(295);
    const m = decodeMessage(bytes);
    expect(m).toMatchObject({ type: 'BIND', acceptMode: 0, nonce: 23, connectionDataLength: 255 });
    if (m.type !== 'BIND') throw new Error('not a BIND');
    expect(Buffer.from(m.connectionData).equals(UNITY_CONNECTION_DATA)).toBe(true);
    expect(Buffer.from(m.hmac).toString('hex')).toBe(UNITY_BIND_HMAC_HEX);
    // HMAC-SHA256 keyed with the 64-byte key over exactly the first 263 bytes.
    expect(UNITY_KEY.length).toBe(64);
    expect(bindHmac(UNITY_KEY, bytes).toString('hex')).toBe(UNITY_BIND_HMAC_HEX);
    expect(createHmac('sha256', UNITY_KEY).update(bytes.subarray(0, 263)).digest('hex')).toBe(
      UNITY_BIND_HMAC_HEX,
    );
    // Our client writes it byte for byte.
    expect(createBind(23, UNITY_CONNECTION_DATA, UNITY_KEY).toString('hex')).toBe(UNITY_BIND_HEX);
    expect(encodeMessage(m).toString('hex')).toBe(UNITY_BIND_HEX);
  });

  it('a big-endian nonce would give a different HMAC (the trap)', () => {
    const be = hex(UNITY_BIND_HEX);
    be.writeUInt16BE(23, 5);
    expect(bindHmac(UNITY_KEY, be).toString('hex')).not.toBe(UNITY_BIND_HMAC_HEX);
    expect(decodeMessage(be)).toMatchObject({ nonce: 0x1700 });
  });

  it('connection data shorter than 255 bytes is zero-padded before signing', () => {
    const short = UNITY_CONNECTION_DATA.subarray(0, 70);
    const bind = createBind(1, short, UNITY_KEY);
    expect(bind.length).toBe(295);
    expect(bind[7]).toBe(255);
    expect(bind.subarray(8 + 70, 263).every((b) => b === 0)).toBe(true);
    expect(bind.subarray(263).equals(bindHmac(UNITY_KEY, bind))).toBe(true);
  });

  it('BIND_RECEIVED is exactly DA 72 00 01', () => {
    expect(decodeMessage(hex(UNITY_BIND_RECEIVED_HEX))).toEqual({ type: 'BIND_RECEIVED' });
    expect(encodeMessage({ type: 'BIND_RECEIVED' }).toString('hex')).toBe('da720001');
  });

  it('PING: 22 bytes, sequence number 1 written little-endian', () => {
    const m = decodeMessage(hex(UNITY_PING_HEX));
    expect(m).toMatchObject({ type: 'PING', sequenceNumber: 1 });
    if (m.type !== 'PING') throw new Error('not a PING');
    expect(Buffer.from(m.fromAllocationId).equals(mockAllocationId(0))).toBe(true);
    expect(encodeMessage(m).toString('hex')).toBe(UNITY_PING_HEX);
  });

  it('CONNECT_REQUEST: 276 bytes, requester id then the host connection data', () => {
    const bytes = hex(UNITY_CONNECT_REQUEST_HEX);
    expect(bytes.length).toBe(276);
    const m = decodeMessage(bytes);
    if (m.type !== 'CONNECT_REQUEST') throw new Error('not a CONNECT_REQUEST');
    expect(Buffer.from(m.allocationId).equals(mockAllocationId(1))).toBe(true);
    expect(m.toConnectionDataLength).toBe(255);
    expect(Buffer.from(m.toConnectionData).equals(UNITY_CONNECTION_DATA)).toBe(true);
    expect(encodeMessage(m).toString('hex')).toBe(UNITY_CONNECT_REQUEST_HEX);
  });

  it('ACCEPTED: 36 bytes, From = host, To = requester', () => {
    const bytes = encodeMessage({
      type: 'ACCEPTED',
      fromAllocationId: mockAllocationId(0),
      toAllocationId: mockAllocationId(1),
    });
    expect(bytes.toString('hex')).toBe(UNITY_ACCEPTED_HEX);
    expect(bytes.length).toBe(36);
  });

  it('RELAY: 38-byte header, big-endian length, content untouched', () => {
    const bytes = hex(UNITY_RELAY_HEX);
    const m = decodeMessage(bytes);
    if (m.type !== 'RELAY') throw new Error('not a RELAY');
    expect(m.data.length).toBe(13);
    expect(bytes.readUInt16BE(36)).toBe(13);
    expect(Buffer.from(m.data).toString('hex')).toBe('55545001010102030405060708');
    expect(Buffer.from(m.fromAllocationId).equals(mockAllocationId(1))).toBe(true);
    expect(Buffer.from(m.toAllocationId).equals(mockAllocationId(0))).toBe(true);
    expect(encodeMessage(m).toString('hex')).toBe(UNITY_RELAY_HEX);
  });

  it('RELAY length must match the datagram exactly', () => {
    const longer = Buffer.concat([hex(UNITY_RELAY_HEX), Buffer.from([0])]);
    expect(decodeError(longer).code).toBe('ERR_TRAILING_BYTES');
    const shorter = hex(UNITY_RELAY_HEX).subarray(0, 45);
    expect(decodeError(shorter).code).toBe('ERR_INCOMPLETE');
  });

  it('DISCONNECT and ERROR (codes 4 and 1) as the mock sends them', () => {
    const d = decodeMessage(hex(UNITY_DISCONNECT_HEX));
    expect(d.type).toBe('DISCONNECT');
    expect(encodeMessage(d).toString('hex')).toBe(UNITY_DISCONNECT_HEX);
    expect(decodeMessage(hex(UNITY_ERROR_4_HEX))).toMatchObject({ type: 'ERROR', errorCode: 4 });
    expect(decodeMessage(hex(UNITY_ERROR_1_HEX))).toMatchObject({ type: 'ERROR', errorCode: 1 });
    expect(hex(UNITY_ERROR_4_HEX).length).toBe(21);
  });

  it('REJECTED (type 8) and CLOSE (type 11)', () => {
    const r = encodeMessage({
      type: 'REJECTED',
      fromAllocationId: mockAllocationId(0),
      toAllocationId: mockAllocationId(2),
    });
    expect(r.subarray(0, 4).toString('hex')).toBe('da720008');
    expect(r.length).toBe(36);
    const c = encodeMessage({ type: 'CLOSE', allocationId: mockAllocationId(2) });
    expect(c.toString('hex')).toBe('da72000b02000000000000000000000000000000');
  });

  it('rejects a bad signature, version or type with DecodeError codes', () => {
    expect(decodeError(hex('da730001')).code).toBe('ERR_BAD_MAGIC');
    expect(decodeError(hex('da720101')).code).toBe('ERR_BAD_MAGIC');
    expect(decodeError(hex('da720004')).code).toBe('ERR_UNKNOWN_TYPE');
    expect(decodeError(hex('da72')).code).toBe('ERR_INCOMPLETE');
    expect(decodeError(hex(UNITY_BIND_HEX).subarray(0, 294)).code).toBe('ERR_INCOMPLETE');
  });

  it('declarations stay introspectable with the right byte orders', () => {
    const info = RelayFrame.info;
    if (info.kind !== 'struct') throw new Error('frame is not a struct');
    expect(info.fields.map((f) => f.name)).toEqual(['signature', 'version', 'message']);
    const union = info.fields[2]!.codec.info;
    if (union.kind !== 'union') throw new Error('message is not a union');
    const byName = new Map(union.variants.map((v) => [v.name, v]));
    expect(byName.get('RELAY')!.tag).toBe(MessageType.RELAY);
    const bind = byName.get('BIND')!.codec.info;
    const relay = byName.get('RELAY')!.codec.info;
    const ping = byName.get('PING')!.codec.info;
    if (bind.kind !== 'struct' || relay.kind !== 'struct' || ping.kind !== 'struct')
      throw new Error('not structs');
    expect(bind.fields.find((f) => f.name === 'nonce')!.codec.info).toMatchObject({
      kind: 'int',
      endian: 'le',
    });
    expect(ping.fields.find((f) => f.name === 'sequenceNumber')!.codec.info).toMatchObject({
      kind: 'int',
      endian: 'le',
    });
    const data = relay.fields.find((f) => f.name === 'data')!.codec.info;
    if (data.kind !== 'bytes' || data.length.type !== 'prefix')
      throw new Error('RELAY data is not length-prefixed');
    expect(data.length.prefix.info).toMatchObject({ kind: 'int', bits: 16, endian: 'be' });
    expect(RelayMessages.variant(MessageType.BIND)!.fixedSize).toBe(291);
  });
});

describe('unity-relay CLI codec (JSON)', () => {
  it('decodes to the contract JSON and encodes it back', () => {
    const json = unityRelayCodec.decode(hex(UNITY_PING_HEX), {});
    expect(json).toEqual({
      type: 'PING',
      fromAllocationId: 'ffffffff000000000000000000000000',
      sequenceNumber: 1,
    });
    expect(unityRelayCodec.encode(json, {}).toString('hex')).toBe(UNITY_PING_HEX);
    const bind = unityRelayCodec.decode(hex(UNITY_BIND_HEX), {}) as Record<string, unknown>;
    expect(Object.keys(bind)).toEqual([
      'type',
      'acceptMode',
      'nonce',
      'connectionDataLength',
      'connectionData',
      'hmac',
    ]);
    expect(bind.hmac).toBe(UNITY_BIND_HMAC_HEX);
  });

  it('several messages back to back decode to an array, in order', () => {
    const both = hex(UNITY_RELAY_HEX + UNITY_ERROR_4_HEX);
    const json = unityRelayCodec.decode(both, {}) as { type: string }[];
    expect(json.map((m) => m.type)).toEqual(['RELAY', 'ERROR']);
    expect(unityRelayCodec.encode(json, {}).equals(both)).toBe(true);
    expect(decodeAll(both)).toHaveLength(2);
  });

  it('encode rejects bad JSON with EncodeError paths', () => {
    expect(() =>
      unityRelayCodec.encode({ type: 'PING', fromAllocationId: 'ff', sequenceNumber: 1 }, {}),
    ).toThrow(/fromAllocationId/);
    expect(() => unityRelayCodec.encode({ type: 'NOPE' }, {})).toThrow(/type/);
    expect(() =>
      unityRelayCodec.encode(
        [{ type: 'BIND_RECEIVED' }, { type: 'ERROR', allocationId: '00', errorCode: 1 }],
        {},
      ),
    ).toThrow(/\[1\]\.allocationId/);
  });
});

const id = fc.uint8Array({ minLength: 16, maxLength: 16 }).map((b) => Buffer.from(b));
const cd = fc.uint8Array({ minLength: 255, maxLength: 255 }).map((b) => Buffer.from(b));
const anyMessage: fc.Arbitrary<RelayMessage> = fc.oneof(
  fc.record({
    type: fc.constant('BIND' as const),
    acceptMode: fc.nat(255),
    nonce: fc.nat(0xffff),
    connectionDataLength: fc.nat(255),
    connectionData: cd,
    hmac: fc.uint8Array({ minLength: 32, maxLength: 32 }).map((b) => Buffer.from(b)),
  }),
  fc.constant({ type: 'BIND_RECEIVED' as const }),
  fc.record({ type: fc.constant('PING' as const), fromAllocationId: id, sequenceNumber: fc.nat(0xffff) }),
  fc.record({
    type: fc.constant('CONNECT_REQUEST' as const),
    allocationId: id,
    toConnectionDataLength: fc.nat(255),
    toConnectionData: cd,
  }),
  fc.record({ type: fc.constant('ACCEPTED' as const), fromAllocationId: id, toAllocationId: id }),
  fc.record({ type: fc.constant('REJECTED' as const), fromAllocationId: id, toAllocationId: id }),
  fc.record({ type: fc.constant('DISCONNECT' as const), fromAllocationId: id, toAllocationId: id }),
  fc.record({
    type: fc.constant('RELAY' as const),
    fromAllocationId: id,
    toAllocationId: id,
    data: fc.uint8Array({ maxLength: 1500 }).map((b) => Buffer.from(b)),
  }),
  fc.record({ type: fc.constant('CLOSE' as const), allocationId: id }),
  fc.record({ type: fc.constant('ERROR' as const), allocationId: id, errorCode: fc.nat(255) }),
);

describe('unity-relay codec properties', () => {
  it('every message round-trips through bytes and through JSON', () => {
    fc.assert(
      fc.property(anyMessage, (m) => {
        const bytes = encodeMessage(m);
        expect(decodeMessage(bytes)).toEqual(m);
        const json = unityRelayCodec.decode(bytes, {});
        expect(unityRelayCodec.encode(JSON.parse(JSON.stringify(json)), {}).equals(bytes)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('arbitrary bytes only ever throw DecodeError', () => {
    const header = fc
      .constantFrom(0, 1, 2, 3, 6, 8, 9, 10, 11, 12, 4, 255)
      .map((t) => Buffer.from([0xda, 0x72, 0, t]));
    const input = fc.oneof(
      fc.uint8Array({ maxLength: 400 }).map((b) => Buffer.from(b)),
      fc.tuple(header, fc.uint8Array({ maxLength: 400 })).map(([h, b]) => Buffer.concat([h, b])),
    );
    fc.assert(
      fc.property(input, (bytes) => {
        try {
          unityRelayCodec.decode(bytes, {});
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).toMatch(/^ERR_/);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 3000 },
    );
  });
});
