import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  framedLength,
  frameResponse,
  responseMeasure,
  unframedLength,
  unframeResponse,
  xorInPlace,
} from '../../../src/protocols/js5/framing.js';
import { Js5Response } from '../../../src/protocols/js5/messages.js';
import { decode, encode } from '../../../src/wire/codec.js';
import { DecodeError } from '../../../src/wire/errors.js';
import { StreamDeframer } from '../../../src/wire/framing.js';

/** A type-0 container of exactly `size` bytes: `00 len` + a counting pattern that never hits 0xff at the wrong place. */
function container(size: number): Buffer {
  const c = Buffer.alloc(size);
  c[0] = 0;
  c.writeInt32BE(size - 5, 1);
  for (let i = 5; i < size; i++) c[i] = i % 251;
  return c;
}

/**
 * The block-marker table (OpenRS2 fixtures 509…1532): container size → framed size and the
 * response offsets that hold a 0xFF marker.
 */
const TABLE: [number, number, number[]][] = [
  [509, 512, []],
  [510, 514, [512]],
  [1020, 1024, [512]],
  [1021, 1026, [512, 1024]],
  [1531, 1536, [512, 1024]],
  [1532, 1538, [512, 1024, 1536]],
];

describe('0xFF block markers', () => {
  test.each(TABLE)('container %i → %i bytes, markers at %j', (size, framedSize, markers) => {
    const c = container(size);
    const f = frameResponse(2, 3, c);
    expect(framedLength(size)).toBe(framedSize);
    expect(f.length).toBe(framedSize);
    expect(f.subarray(0, 3)).toEqual(Buffer.from('020003', 'hex'));
    // Byte-exact: the expected frame is built here by hand from the table's marker offsets.
    const expected: number[] = [2, 0, 3];
    let i = 0;
    while (expected.length < framedSize) {
      if (markers.includes(expected.length)) expected.push(0xff);
      else expected.push(c[i++]!);
    }
    expect(i).toBe(size);
    expect(f.equals(Buffer.from(expected))).toBe(true);
    expect(unframeResponse(f, 0, f.length).equals(Buffer.concat([Buffer.from('020003', 'hex'), c]))).toBe(
      true,
    );
    expect(unframedLength(framedSize)).toBe(size + 3);
  });

  test.each(TABLE)('prefetch form of %i sets 0x80 in the compression byte only', (size) => {
    const urgent = frameResponse(2, 3, container(size));
    const prefetch = frameResponse(2, 3, container(size), true);
    expect(prefetch[3]).toBe(0x80);
    prefetch[3] = 0;
    expect(prefetch.equals(urgent)).toBe(true);
  });

  test('a wrong marker byte is rejected (invalid-block-trailer)', () => {
    const f = frameResponse(2, 3, container(510));
    f[512] = 0xfe;
    expect(() => unframeResponse(f, 0, f.length)).toThrow(DecodeError);
    expect(() => decode(Js5Response, f)).toThrow(
      expect.objectContaining({ code: 'ERR_JS5_BAD_MARKER', offset: 512 }),
    );
  });

  test('framed length formula matches OpenRS2 capacity for 1..1534', () => {
    for (let c = 5; c <= 1534; c++) {
      expect(framedLength(c)).toBe(frameResponse(0, 0, container(c)).length);
      expect(framedLength(c)).toBe(2 + c + Math.floor((512 + c) / 511));
    }
  });

  test('no marker after the last byte when a response ends exactly on a boundary', () => {
    const f = frameResponse(0, 0, container(1020));
    expect(f.length).toBe(1024);
    expect(f[1023]).not.toBe(0xff);
  });
});

describe('XOR', () => {
  test('key 32 turns "OpenRS2" into "oPENrs\\x12" (OpenRS2 XorEncoderTest)', () => {
    const b = Buffer.from('OpenRS2');
    xorInPlace(b, 32);
    expect(b.toString('latin1')).toBe('oPENrs\u0012');
    xorInPlace(b, 32);
    expect(b.toString()).toBe('OpenRS2');
  });

  test('key 0 is the identity', () => {
    const b = Buffer.from('OpenRS2');
    xorInPlace(b, 0);
    expect(b.toString()).toBe('OpenRS2');
  });
});

describe('response codec', () => {
  test('decodes the OpenRS2 fragmented example', () => {
    const bytes = Buffer.concat([Buffer.from('0200030000000007', 'hex'), Buffer.from('OpenRS2')]);
    const chunks = [bytes.subarray(0, 3), bytes.subarray(3, 9), bytes.subarray(9)];
    const d = new StreamDeframer(responseMeasure(), { maxFrameBytes: 1 << 20 });
    const frames: Buffer[] = [];
    for (const c of chunks) d.push(c, (b, s, e) => void frames.push(Buffer.from(b.subarray(s, e))));
    expect(frames).toHaveLength(1);
    const v = decode(Js5Response, frames[0]!);
    expect(v).toMatchObject({ archive: 2, group: 3, prefetch: false, compression: 0 });
    expect(v.data.toString()).toBe('OpenRS2');
  });

  test.each([
    ['negative length', '0200030 0ffffffff'],
    ['overflowing length (type 0)', '020003007ffffffb'],
    ['overflowing length (type 1)', '020003017ffffff7'],
    ['unknown compression', '0200030400000001aa'],
  ])('rejects %s', (_name, hex) => {
    const bytes = Buffer.from(hex.replace(/\s+/g, ''), 'hex');
    expect(() => decode(Js5Response, bytes)).toThrow(DecodeError);
    const d = new StreamDeframer(responseMeasure(), { maxFrameBytes: 1 << 20 });
    expect(() => d.push(bytes, () => {})).toThrow(DecodeError);
  });

  test('round trip (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 255 }),
        fc.integer({ min: 0, max: 0xffff }),
        fc.boolean(),
        fc.integer({ min: 0, max: 3 }),
        fc.uint8Array({ maxLength: 3000 }),
        (archive, group, prefetch, compression, data) => {
          const v = {
            type: 'response' as const,
            archive,
            group,
            prefetch,
            compression,
            data: Buffer.from(data),
            ...(compression === 0 ? {} : { uncompressedLength: data.length * 2 }),
          };
          const bytes = encode(Js5Response, v);
          expect(bytes.length).toBe(framedLength(data.length + (compression === 0 ? 5 : 9)));
          expect(decode(Js5Response, bytes)).toEqual(v);
          expect(Js5Response.fromJson(JSON.parse(JSON.stringify(Js5Response.toJson(v))), '')).toEqual(v);
        },
      ),
      { numRuns: 200 },
    );
  });

  test('arbitrary bytes → only DecodeError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1200 }), (bytes) => {
        try {
          decode(Js5Response, bytes);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          // decode() turns any other throwable into ERR_INTERNAL: that would be a decoder bug.
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 500 },
    );
  });
});
