/**
 * The RMC envelope declared once with `select` (messages.ts): round trips of every branch in
 * every variant, arbitrary bytes give only DecodeError, and the packet codecs, the client's
 * request encoding and the server's failure frames all write the declaration's bytes.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { writeFailure } from '../../../src/protocols/rmc/envelope.js';
import {
  ClassicEnvelope,
  classicPacket,
  HyperscapeEnvelope,
  hyperscapePacket,
  NexVerboseEnvelope,
  nexVerbosePacket,
} from '../../../src/protocols/rmc/messages.js';
import { type Codec, DecodeError, decode, encode, WireWriter } from '../../../src/wire/index.js';
import { memoryPeer } from './helpers.js';

const u32 = fc.integer({ min: 0, max: 0xffff_ffff });
const name = fc.string({ maxLength: 24 }).filter((s) => !s.includes('\0'));
const blob = fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b));
const classVersions = fc.array(fc.record({ name, version: fc.integer({ min: 0, max: 0xffff }) }), {
  maxLength: 3,
});

const verboseRequest = fc.record({
  type: fc.constant('request' as const),
  protocol: name,
  isRequest: fc.constant(true),
  callId: u32,
  method: name,
  classVersions,
  args: blob,
});
const verboseResponse = fc.record({
  type: fc.constant('response' as const),
  protocol: name,
  isRequest: fc.constant(false),
  success: fc.constant(true),
  callId: u32,
  method: name,
  results: blob,
});
const hyperscapeError = fc.record({
  type: fc.constant('error' as const),
  protocol: name,
  isRequest: fc.constant(false),
  success: fc.constant(false),
  namespace: name,
  code: fc.integer({ min: 0, max: 0xffff }),
  callId: u32,
});
const nexError = fc.record({
  type: fc.constant('error' as const),
  protocol: name,
  isRequest: fc.constant(false),
  success: fc.constant(false),
  errorCode: u32,
  callId: u32,
});
const protocolId = fc.integer({ min: 0, max: 0xffff });
const classic = fc.oneof(
  fc.record({
    type: fc.constant('request' as const),
    protocolId,
    isRequest: fc.constant(true),
    callId: u32,
    methodId: u32,
    args: blob,
  }),
  fc.record({
    type: fc.constant('response' as const),
    protocolId,
    isRequest: fc.constant(false),
    success: fc.constant(true),
    callId: u32,
    methodId: fc.integer({ min: 0, max: 0x7fff }),
    results: blob,
  }),
  fc.record({
    type: fc.constant('error' as const),
    protocolId,
    isRequest: fc.constant(false),
    success: fc.constant(false),
    errorCode: u32,
    callId: u32,
  }),
);

const envelopes: [string, Codec<any>, fc.Arbitrary<Record<string, unknown>>][] = [
  ['hyperscape', HyperscapeEnvelope, fc.oneof(verboseRequest, verboseResponse, hyperscapeError)],
  ['nex-verbose', NexVerboseEnvelope, fc.oneof(verboseRequest, verboseResponse, nexError)],
  ['classic', ClassicEnvelope, classic],
];
const packets: [string, Codec<any>][] = [
  ['hyperscape', hyperscapePacket],
  ['nex-verbose', nexVerbosePacket],
  ['classic', classicPacket],
];

describe('the declared RMC envelope', () => {
  it.each(envelopes)('%s: every branch round-trips, bytes and JSON', (_n, codec, values) => {
    fc.assert(
      fc.property(values, (v) => {
        const bytes = encode(codec, v);
        const back = decode(codec, bytes) as Record<string, unknown>;
        expect(back).toEqual(v);
        expect(encode(codec, codec.fromJson(codec.toJson(back), '')).equals(bytes)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it.each(envelopes)(
    '%s: the packet codec writes the length, then exactly the envelope',
    (n, codec, values) => {
      const packet = packets.find(([p]) => p === n)![1];
      fc.assert(
        fc.property(values, (v) => {
          const body = encode(codec, v);
          const { isRequest: _r, success: _s, ...message } = v;
          const framed = encode(packet, message);
          expect(framed.readUInt32LE(0)).toBe(body.length);
          expect(framed.subarray(4).equals(body)).toBe(true);
          expect(decode(packet, framed)).toEqual(message);
        }),
        { numRuns: 200 },
      );
    },
  );

  it.each(packets)('%s: arbitrary bytes give only DecodeError', (_n, packet) => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.boolean(), (raw, framed) => {
        let b = Buffer.from(raw);
        // Half the inputs carry a correct length, so the envelope itself is exercised.
        if (framed) b = Buffer.concat([Buffer.alloc(4), b]).fill(0, 0, 4);
        if (framed) b.writeUInt32LE(raw.length, 0);
        try {
          decode(packet, b);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('the server failure frame is the declaration: hyperscape, nex-verbose and classic', () => {
    const w = new WireWriter();
    writeFailure(w, 'hyperscape', { protocol: 'P', callId: 7, protocolId: undefined }, 'Core', 5);
    expect(w.toBuffer().toString('hex')).toBe(
      '13000000' + '02005000' + '00' + '00' + '0500436f726500' + '0500' + '07000000',
    );
    expect(decode(hyperscapePacket, w.toBuffer())).toEqual({
      type: 'error',
      protocol: 'P',
      namespace: 'Core',
      code: 5,
      callId: 7,
    });
    const c = new WireWriter();
    writeFailure(c, 'classic', { protocol: '#10', callId: 7, protocolId: 10 }, 'Core', 5);
    expect(decode(classicPacket, c.toBuffer())).toMatchObject({ type: 'error', protocolId: 10, callId: 7 });
    expect(c.toBuffer().subarray(4, 6).toString('hex')).toBe('0a00');
  });

  it('unknown types are EncodeErrors naming type', () => {
    expect(() => encode(hyperscapePacket as Codec<unknown>, { type: 'nope', protocol: 'P' })).toThrow(/type/);
  });
});

describe('docs/rmc.md', () => {
  it('lists every branch of every declared envelope, as the declaration has it', async () => {
    const { readFileSync } = await import('node:fs');
    const { envelopeRows } = await import('../../../src/protocols/rmc/messages.js');
    const doc = readFileSync(new URL('../../../docs/rmc.md', import.meta.url), 'utf8');
    for (const [variant, codec] of envelopes) {
      for (const r of envelopeRows(codec)) {
        const line = `| ${variant} | ${r.type} | ${r.branch} | ${r.fields.map((f) => `\`${f}\``).join(', ')} |`;
        expect(doc).toContain(line);
      }
    }
  });
});

describe("the server's fast envelope path writes the declaration's bytes", () => {
  it('requests encoded by the declaration get replies that are the declaration, byte for byte', async () => {
    const { silentLogger } = await import('../../../src/core/logger.js');
    const { defineProtocol, method, qString, RmcServer, RmcError } = await import(
      '../../../src/protocols/rmc/index.js'
    );
    const Echo = defineProtocol('EchoProtocol', 'test', {
      Echo_V1: method({ args: { text: qString }, results: { text: qString }, layout: 'unknown', doc: '' }),
    });
    const server = new RmcServer({ log: silentLogger() });
    server.register(Echo, {
      Echo_V1: (_ctx, { text }) => {
        if (text.startsWith('!')) throw new RmcError('Core', 0x0a);
        return { text };
      },
    });
    const writer = new WireWriter();
    const conn = server.dispatcher.open({
      writer,
      commit: () => {},
      close: () => {},
      connection: memoryPeer('10.0.0.1', 1),
    });
    fc.assert(
      fc.property(u32, name, (callId, text) => {
        writer.reset();
        const args = encode(Echo.methods.Echo_V1.args, { text });
        const req = encode(hyperscapePacket, {
          type: 'request',
          protocol: 'EchoProtocol',
          callId,
          method: 'EchoProtocol::Echo_V1',
          classVersions: [],
          args,
        });
        server.dispatcher.handleFrame(conn, req, 0, req.length);
        const expected = text.startsWith('!')
          ? { type: 'error', protocol: 'EchoProtocol', namespace: 'Core', code: 0x0a, callId }
          : {
              type: 'response',
              protocol: 'EchoProtocol',
              callId,
              method: 'EchoProtocol::Echo_V1*',
              results: encode(Echo.methods.Echo_V1.results, { text }),
            };
        expect(writer.toBuffer().equals(encode(hyperscapePacket as Codec<unknown>, expected))).toBe(true);
      }),
      { numRuns: 200 },
    );
  });
});
