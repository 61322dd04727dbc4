/**
 * A declared flow (`FlowDeclaration`): the inspector's decoder made from the declaration alone.
 * Whole messages come out as the unions' JSON, whatever the TCP fragmentation; arbitrary bytes
 * give only typed errors, never an exception out of the decoder.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { declaredFlow, type FlowDeclaration } from '../../src/core/flow.js';
import type { Direction } from '../../src/core/protocol.js';
import { encode, type Json, message, string, t, union } from '../../src/wire/codec.js';
import { DecodeError } from '../../src/wire/errors.js';

const up = union(t.u8, {
  Say: [1, message('Say', { text: string(t.u16be) })],
  Ping: [2, message('Ping', { nonce: t.u32be })],
});
const down = union(t.u8, { Said: [1, message('Said', { text: string(t.u16be) })] });

const decl: FlowDeclaration = {
  name: 'toy',
  abbrev: 'gw_toy',
  title: 'toy',
  column: 'TOY',
  description: 'toy',
  tcpPorts: [1],
  udpPorts: [1],
  tcp: { prefix: 'u16be', counts: 'rest' },
  udp: 'datagram',
  messages: { client: up, server: down },
  clientSignature: { offset: 0, bytes: [1] },
};

function run(feed: (d: ReturnType<ReturnType<typeof declaredFlow>['create']>) => void) {
  const messages: [Direction, Json][] = [];
  const errors: DecodeError[] = [];
  const decoder = declaredFlow(decl).create(
    { message: (d, m) => messages.push([d, m]), error: (_d, e) => errors.push(e) },
    { maxFrameBytes: 1 << 16 },
  );
  feed(decoder);
  return { messages, errors };
}

function framed(body: Buffer): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(body.length);
  return Buffer.concat([b, body]);
}

describe('a declared flow', () => {
  it('decodes TCP frames whatever the cuts, and datagrams whole', () => {
    const stream = Buffer.concat([
      framed(encode(up, { type: 'Say', text: 'hi' })),
      framed(encode(up, { type: 'Ping', nonce: 9 })),
    ]);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: stream.length }), { maxLength: 6 }), (cuts) => {
        const points = [...new Set([0, ...cuts, stream.length])].sort((a, b) => a - b);
        const { messages, errors } = run((d) => {
          for (let i = 0; i + 1 < points.length; i++)
            d.stream('client', stream.subarray(points[i], points[i + 1]), points[i]!);
        });
        expect(errors).toEqual([]);
        expect(messages).toEqual([
          ['client', { type: 'Say', text: 'hi' }],
          ['client', { type: 'Ping', nonce: 9 }],
        ]);
      }),
    );
    const udp = run((d) => d.datagram('server', encode(down, { type: 'Said', text: 'yo' })));
    expect(udp.messages).toEqual([['server', { type: 'Said', text: 'yo' }]]);
    expect(declaredFlow(decl).detect!('udp', Buffer.from([1, 0, 0]))).toBe('client');
    expect(declaredFlow(decl).detect!('tcp', Buffer.from([0, 3, 2]))).toBeUndefined();
  });

  it('gives arbitrary bytes only typed errors (with offsets inside the input)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.boolean(), (bytes, tcp) => {
        const buf = Buffer.from(bytes);
        const { errors } = run((d) => {
          if (tcp) d.stream('client', buf, 0);
          else d.datagram('client', buf);
        });
        for (const e of errors) {
          expect(e).toBeInstanceOf(DecodeError);
          expect(e.code).not.toBe('ERR_INTERNAL');
          expect(e.offset).toBeGreaterThanOrEqual(0);
          expect(e.offset).toBeLessThanOrEqual(buf.length);
        }
      }),
      { numRuns: 500 },
    );
  });
});
