/**
 * PRUDP codec: checksums (1 and 4 bytes, key only on stream 3), RC4 "CD&ML", the compression
 * byte, packets and coalesced datagrams, the declared header, and the CLI's decode/encode prudp.
 */
import { inflateSync } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  accessKeyByte,
  ClassicPayloadCodec,
  checksum8,
  checksum32,
  compressBody,
  decompressBody,
  Flag,
  learnFromSyn,
  newPacket,
  PacketType,
  PrudpHeader,
  Rc4Key,
  readPacket,
  SecurePayloadCodec,
  writePacket,
} from '../../../src/protocols/rmc/index.js';
import { DecodeError, decode, WireWriter } from '../../../src/wire/index.js';
import { errorOf, runCli } from '../../helpers/cli.js';

const KEY = 'yl4NG7qZ';
const CFG = { width: 1 as const, keyByte: accessKeyByte(KEY) };

function packet(
  f: Parameters<typeof writePacket>[1],
  payload?: Buffer,
  cfg: { width: 1 | 4; keyByte: number } = CFG,
): Buffer {
  const w = new WireWriter();
  writePacket(w, f, payload, cfg);
  return w.toBuffer();
}

describe('checksums', () => {
  it('SC:BL key byte and the client SYN checksum (0x40 with the key, 0x90 with key 0)', () => {
    expect(accessKeyByte(KEY)).toBe(0xb0);
    const syn = Buffer.from('3f312000000000000000' + '00000000', 'hex');
    expect(checksum8(syn, 0, 14, 0)).toBe(0x90);
    expect(checksum8(syn, 0, 14, 0xb0)).toBe(0x40);
  });

  it('1-byte checksum: key + bytes of the u32 word sum + tail bytes (written out by hand)', () => {
    const data = Buffer.from([0xff, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00, 0x00, 0x07, 0x09]);
    // words: 0xffffffff + 1 = 0 (mod 2^32) -> byte sum 0; tail 7 + 9; key 3
    expect(checksum8(data, 0, data.length, 3)).toBe(19);
  });

  it('4-byte checksum: key + u32 sum of zero-padded words', () => {
    const data = Buffer.from([1, 0, 0, 0, 2, 0, 0, 0, 5]);
    expect(checksum32(data, 0, data.length, 0xb0)).toBe(1 + 2 + 5 + 0xb0);
    const wrap = Buffer.from([0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0]);
    expect(checksum32(wrap, 0, wrap.length, 0)).toBe(1);
  });

  it('learns width and key byte from a first SYN (15/17 bytes: 1-byte, 18/20: 4-byte)', () => {
    const syn = packet({
      source: 0x3f,
      destination: 0x31,
      type: 0,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
    });
    expect(syn.length).toBe(15);
    expect(syn[14]).toBe(0x40);
    expect(learnFromSyn(syn)).toEqual({ width: 1, keyByte: 0xb0 });
    const syn4 = packet(
      {
        source: 0x3f,
        destination: 0x31,
        type: 0,
        flags: Flag.NEED_ACK | Flag.HAS_SIZE,
        sessionId: 0,
        packetSignature: 0,
        sequenceId: 0,
      },
      undefined,
      { width: 4, keyByte: 0x5a },
    );
    expect(syn4.length).toBe(20);
    expect(learnFromSyn(syn4)).toEqual({ width: 4, keyByte: 0x5a });
    expect(learnFromSyn(Buffer.alloc(16))).toBeUndefined();
  });

  it('the key byte counts only on stream 3 (DO packets use 0)', () => {
    const a = packet(
      {
        source: 0x1f,
        destination: 0x11,
        type: 2,
        flags: 0x20,
        sessionId: 1,
        packetSignature: 2,
        sequenceId: 3,
      },
      Buffer.from('00aa', 'hex'),
    );
    const b = packet(
      {
        source: 0x1f,
        destination: 0x11,
        type: 2,
        flags: 0x20,
        sessionId: 1,
        packetSignature: 2,
        sequenceId: 3,
      },
      Buffer.from('00aa', 'hex'),
      { width: 1, keyByte: 0 },
    );
    expect(a.equals(b)).toBe(true);
  });
});

describe('payloads', () => {
  it('RC4 "CD&ML" keystream starts 0f 87 44 db … and restarts for every packet', () => {
    const k = new Rc4Key('CD&ML');
    expect(k.process(Buffer.alloc(16)).toString('hex')).toBe('0f8744db13ff2c5005a261fd2a16f2b1');
    expect(k.process(Buffer.alloc(4)).toString('hex')).toBe('0f8744db');
  });

  it('compresses only when smaller; the byte is ceil(len/zlen); any non-zero byte reads as zlib', () => {
    const small = Buffer.from('0e000000a716000000020000000300646500', 'hex');
    expect(compressBody(small)[0]).toBe(0);
    const big = Buffer.alloc(900, 0x41);
    const c = compressBody(big);
    const zlen = c.length - 1;
    expect(c[0]).toBe(Math.ceil(900 / zlen));
    expect(inflateSync(c.subarray(1)).equals(big)).toBe(true);
    const odd = Buffer.concat([Buffer.from([2]), c.subarray(1)]);
    expect(decompressBody(odd, 1000).equals(big)).toBe(true);
    expect(() => decompressBody(odd, 100)).toThrow(DecodeError);
  });

  it('classic payload: an uncompressed one starts with 0x0f on the wire', () => {
    const codec = new ClassicPayloadCodec();
    const wire = codec.encode(Buffer.from('0e000000a716000000020000000300646500', 'hex'));
    expect(wire[0]).toBe(0x0f);
    expect(codec.decode(wire, 1000).toString('hex')).toBe('0e000000a716000000020000000300646500');
  });

  it('secure payload: IV + AES-128-CBC, decodes with node:crypto directly', async () => {
    const { createDecipheriv } = await import('node:crypto');
    const key = Buffer.alloc(16, 7);
    const codec = new SecurePayloadCodec(key);
    const msg = Buffer.alloc(300, 0x33);
    const wire = codec.encode(msg);
    const d = createDecipheriv('aes-128-cbc', key, wire.subarray(0, 16));
    const plain = Buffer.concat([d.update(wire.subarray(16)), d.final()]);
    expect(plain[0]).not.toBe(0);
    expect(inflateSync(plain.subarray(1)).equals(msg)).toBe(true);
    expect(codec.decode(wire, 1000).equals(msg)).toBe(true);
    expect(() => codec.decode(wire.subarray(0, 20), 1000)).toThrow(DecodeError);
  });
});

const arbFields = fc.record({
  source: fc.integer({ min: 0, max: 255 }),
  destination: fc.integer({ min: 0, max: 255 }),
  type: fc.integer({ min: 0, max: 7 }),
  flags: fc.integer({ min: 0, max: 31 }).map((f) => f << 3),
  sessionId: fc.integer({ min: 0, max: 255 }),
  packetSignature: fc.integer({ min: 0, max: 0xffffffff }),
  sequenceId: fc.integer({ min: 0, max: 0xffff }),
  connectionSignature: fc.integer({ min: 0, max: 0xffffffff }),
  fragmentId: fc.integer({ min: 0, max: 255 }),
});

describe('packets', () => {
  it('round trip: write then read gives the same fields (1- and 4-byte checksums)', () => {
    fc.assert(
      fc.property(
        arbFields,
        fc.uint8Array({ maxLength: 200 }),
        fc.constantFrom(1, 4),
        (f, payload, width) => {
          const cfg = { width: width as 1 | 4, keyByte: 0xb0 };
          const bytes = packet(f, Buffer.from(payload), cfg);
          const p = newPacket();
          expect(readPacket(bytes, 0, cfg, p)).toBe(bytes.length);
          expect(p.type).toBe(f.type);
          expect(p.flags).toBe(f.flags);
          expect(p.sequenceId).toBe(f.sequenceId);
          expect(p.connectionSignature).toBe(f.type <= 1 ? f.connectionSignature : 0);
          expect(p.fragmentId).toBe(f.type === 2 ? f.fragmentId : 0);
          expect(Buffer.from(p.payload).equals(Buffer.from(payload))).toBe(true);
          // The declared header reads the same fields.
          const h = decode(PrudpHeader, bytes, { allowTrailing: true }) as unknown as Record<string, number>;
          expect(h.typeFlags).toBe(f.flags | f.type);
          expect(h.packetSignature).toBe(f.packetSignature);
          if ((f.flags & Flag.HAS_SIZE) !== 0) expect(h.payloadSize).toBe(payload.length);
        },
      ),
    );
  });

  it('coalesced datagrams: sized packets back to back', () => {
    const a = packet({
      source: 0x31,
      destination: 0x3f,
      type: 2,
      flags: 0x48,
      sessionId: 9,
      packetSignature: 1,
      sequenceId: 2,
    });
    const b = packet(
      {
        source: 0x31,
        destination: 0x3f,
        type: 2,
        flags: 0x70,
        sessionId: 9,
        packetSignature: 1,
        sequenceId: 1,
      },
      Buffer.from('0f00', 'hex'),
    );
    const d = Buffer.concat([a, b]);
    const p = newPacket();
    const off = readPacket(d, 0, CFG, p);
    expect(off).toBe(a.length);
    expect(p.flags & Flag.ACK).toBe(Flag.ACK);
    expect(readPacket(d, off, CFG, p)).toBe(d.length);
    expect(p.payload.toString('hex')).toBe('0f00');
  });

  it('a wrong checksum is ERR_BAD_CHECKSUM with the expected and actual values', () => {
    const a = packet({
      source: 0x3f,
      destination: 0x31,
      type: 0,
      flags: 0x20,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
    });
    a[a.length - 1] = 0x41;
    try {
      readPacket(a, 0, CFG, newPacket());
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(DecodeError);
      expect((e as DecodeError).code).toBe('ERR_BAD_CHECKSUM');
      expect((e as DecodeError).message).toContain('expected 0x40, got 0x41');
    }
  });

  it('arbitrary bytes give only DecodeError (never another exception, never out of bounds)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 80 }), fc.constantFrom(1, 4), (bytes, width) => {
        const buf = Buffer.from(bytes);
        const p = newPacket();
        try {
          let off = 0;
          while (off < buf.length) off = readPacket(buf, off, { width: width as 1 | 4, keyByte: 0xb0 }, p);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
        const codec = new ClassicPayloadCodec();
        try {
          codec.decode(buf, 1 << 16);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
        try {
          new SecurePayloadCodec(Buffer.alloc(16)).decode(buf, 1 << 16);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('gamewire decode/encode prudp', () => {
  const request = Buffer.from('0e000000a716000000020000000300646500', 'hex');
  const data = packet(
    {
      source: 0x3f,
      destination: 0x31,
      type: PacketType.DATA,
      flags: 0x30,
      sessionId: 0x13,
      packetSignature: 0x2ded91e4,
      sequenceId: 2,
      fragmentId: 0,
    },
    new ClassicPayloadCodec().encode(request),
  );

  it('decodes a classic DATA packet down to the RMC request and encodes it back byte-exactly', () => {
    const d = runCli(['decode', 'prudp', '--access-key', KEY, '--hex', data.toString('hex')]);
    expect(d.stderr).toBe('');
    expect(d.code).toBe(0);
    const j = JSON.parse(d.stdout);
    expect(j).toMatchObject({
      type: 'DATA',
      source: { streamType: 3, port: 15 },
      destination: { streamType: 3, port: 1 },
      flags: ['RELIABLE', 'NEED_ACK'],
      sessionId: 0x13,
      sequenceId: 2,
      fragmentId: 0,
      decoded: {
        compression: 0,
        plaintext: request.toString('hex'),
        rmc: { type: 'request', protocolId: 0x27, callId: 22, methodId: 2 },
      },
    });
    const e = runCli(['encode', 'prudp', '--access-key', KEY, '--json', d.stdout]);
    expect(e.code).toBe(0);
    expect(e.stdout.trim()).toBe(data.toString('hex'));
  });

  it('several packets in one datagram decode to an array', () => {
    const ack = packet({
      source: 0x31,
      destination: 0x3f,
      type: 2,
      flags: 0x48,
      sessionId: 1,
      packetSignature: 5,
      sequenceId: 2,
    });
    const d = runCli([
      'decode',
      'prudp',
      '--access-key',
      KEY,
      '--hex',
      Buffer.concat([ack, ack]).toString('hex'),
    ]);
    expect(d.code).toBe(0);
    expect(JSON.parse(d.stdout)).toHaveLength(2);
  });

  it('a wrong checksum is ERR_BAD_CHECKSUM (exit 1) naming expected and actual', () => {
    const bad = Buffer.from(data);
    bad[bad.length - 1] ^= 0xff;
    const d = runCli(['decode', 'prudp', '--access-key', KEY, '--hex', bad.toString('hex')]);
    expect(d.code).toBe(1);
    const err = errorOf(d);
    expect(err.code).toBe('ERR_BAD_CHECKSUM');
    expect(err.message).toMatch(/expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}/);
  });

  it('missing --access-key is a usage error; --access-key on another codec too', () => {
    expect(runCli(['decode', 'prudp', '--hex', '00']).code).toBe(2);
    expect(runCli(['decode', 'rmc', '--access-key', 'x', '--hex', '00']).code).toBe(2);
  });

  it('--session-key decodes HyperScape secure DATA down to the string-named RMC', () => {
    const key = Buffer.alloc(16, 9);
    const body = Buffer.concat([
      Buffer.from([0x15, 0, ...Buffer.from('CloudServersProtocol\0'), 1, 5, 0, 0, 0, 0x28, 0]),
      Buffer.from('CloudServersProtocol::GetDatacenters_V1\0'),
      Buffer.alloc(4),
    ]);
    const msg = Buffer.concat([Buffer.alloc(4), body]);
    msg.writeUInt32LE(body.length, 0);
    const secure = packet(
      {
        source: 0x3f,
        destination: 0x31,
        type: PacketType.DATA,
        flags: 0x30,
        sessionId: 1,
        packetSignature: 2,
        sequenceId: 2,
        fragmentId: 0,
      },
      new SecurePayloadCodec(key).encode(msg),
    );
    const args = [
      'decode',
      'prudp',
      '--access-key',
      KEY,
      '--rmc-variant',
      'hyperscape',
      '--hex',
      secure.toString('hex'),
    ];
    const plain = runCli(args);
    expect(plain.code).toBe(0);
    expect(JSON.parse(plain.stdout).decoded).toBeUndefined();
    const d = runCli([...args, '--session-key', key.toString('hex')]);
    expect(d.stderr).toBe('');
    expect(JSON.parse(d.stdout).decoded.rmc).toMatchObject({
      type: 'request',
      protocol: 'CloudServersProtocol',
      callId: 5,
      method: 'CloudServersProtocol::GetDatacenters_V1',
    });
  });
});
