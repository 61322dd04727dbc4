import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DecodeError, fixedFrames, lengthPrefixed, StreamDeframer } from '../../src/wire/index.js';

function frame16(payload: Buffer): Buffer {
  const b = Buffer.alloc(2 + payload.length);
  b.writeUInt16BE(b.length, 0);
  payload.copy(b, 2);
  return b;
}

function collect(d: StreamDeframer, chunks: Buffer[]): Buffer[] {
  const out: Buffer[] = [];
  for (const c of chunks) d.push(c, (buf, s, e) => void out.push(Buffer.from(buf.subarray(s, e))));
  return out;
}

const measure = lengthPrefixed({ prefix: 'u16be', counts: 'frame', minFrameBytes: 3, maxFrameBytes: 1024 });

describe('StreamDeframer', () => {
  it('yields the same frames whatever the fragmentation and coalescing', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ minLength: 1, maxLength: 300 }), { minLength: 1, maxLength: 20 }),
        fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 50 }),
        (payloads, cuts) => {
          const frames = payloads.map((p) => frame16(Buffer.from(p)));
          const stream = Buffer.concat(frames);
          const chunks: Buffer[] = [];
          let at = 0;
          for (let i = 0; at < stream.length; i++) {
            const n = cuts[i % cuts.length]!;
            chunks.push(stream.subarray(at, at + n));
            at += n;
          }
          const d = new StreamDeframer(measure, { maxFrameBytes: 1024 });
          expect(collect(d, chunks)).toEqual(frames);
          expect(d.buffered).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('distinguishes "need more bytes" (held) from malformed (DecodeError)', () => {
    const d = new StreamDeframer(measure, { maxFrameBytes: 1024 });
    expect(collect(d, [Buffer.from([0x00])])).toEqual([]);
    expect(d.buffered).toBe(1);
    expect(collect(d, [Buffer.from([0x03, 0xaa])])).toEqual([Buffer.from([0, 3, 0xaa])]);
    expect(() => collect(d, [Buffer.from([0x00, 0x01])])).toThrow(DecodeError);
    try {
      collect(d, [Buffer.from([0x00])]);
    } catch (e) {
      expect((e as DecodeError).code).toBe('ERR_BAD_LENGTH'); // stays failed
      expect((e as DecodeError).offset).toBe(3);
    }
  });

  it('rejects an oversized length before buffering its payload', () => {
    const d = new StreamDeframer(
      lengthPrefixed({ prefix: 'u32le', counts: 'rest', maxFrameBytes: 1 << 20 }),
      {
        maxFrameBytes: 1 << 20,
      },
    );
    try {
      collect(d, [Buffer.from('ffffff7f00', 'hex')]);
      throw new Error('expected an error');
    } catch (e) {
      expect((e as DecodeError).code).toBe('ERR_TOO_LARGE');
    }
  });

  it('hands frames out of a single chunk as views (no copy)', () => {
    const d = new StreamDeframer(fixedFrames(2), { maxFrameBytes: 2 });
    const chunk = Buffer.from('01020304', 'hex');
    const seen: Buffer[] = [];
    d.push(chunk, (buf) => void seen.push(buf));
    expect(seen).toEqual([chunk, chunk]);
  });

  it('pauses when the handler returns false and resumes with what it held', () => {
    const d = new StreamDeframer(fixedFrames(1), { maxFrameBytes: 1 });
    const got: number[] = [];
    expect(
      d.push(Buffer.from([1, 2, 3]), (b, s) => {
        got.push(b[s]!);
        return got.length < 2;
      }),
    ).toBe(false);
    expect(got).toEqual([1, 2]);
    expect(d.isPaused).toBe(true);
    expect(d.push(Buffer.from([4]), () => true)).toBe(false); // held while paused
    expect(d.resume((b, s) => void got.push(b[s]!))).toBe(true);
    expect(got).toEqual([1, 2, 3, 4]);
  });

  it('caps what it holds while waiting', () => {
    const d = new StreamDeframer(fixedFrames(1), { maxFrameBytes: 1, maxBufferedBytes: 4 });
    d.push(Buffer.from([1]), () => false);
    expect(() => d.push(Buffer.alloc(10), () => true)).toThrow(/buffered/);
  });
});
