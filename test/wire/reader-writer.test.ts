import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DecodeError, WireReader, WireWriter } from '../../src/wire/index.js';

function err(fn: () => unknown): DecodeError {
  try {
    fn();
  } catch (e) {
    if (e instanceof DecodeError) return e;
    throw e;
  }
  throw new Error('expected a DecodeError');
}

describe('WireReader', () => {
  const bytes = Buffer.from('0102030405060708', 'hex');

  it('reads each width in the byte order the call names', () => {
    const r = new WireReader(bytes);
    expect(r.u16le()).toBe(0x0201);
    expect(r.u16be()).toBe(0x0304);
    expect(r.u32le()).toBe(0x08070605);
    r.reset(bytes);
    expect(r.u32be()).toBe(0x01020304);
    expect(r.u24be()).toBe(0x050607);
    r.reset(bytes);
    expect(r.u64le()).toBe(0x0807060504030201n);
    r.reset(bytes);
    expect(r.u64be()).toBe(0x0102030405060708n);
  });

  it('sign-extends signed reads', () => {
    const r = new WireReader(Buffer.from('fffeffffff80', 'hex'));
    expect(r.i16be()).toBe(-2);
    expect(r.i32le()).toBe(-2130706433); // 0x80ffffff
  });

  it('reads floats both ways', () => {
    const r = new WireReader(Buffer.from('0000c03f3fc00000', 'hex'));
    expect(r.f32le()).toBe(1.5);
    expect(r.f32be()).toBe(1.5);
  });

  it('fails a read past the end with ERR_INCOMPLETE at the read offset, never a RangeError', () => {
    const r = new WireReader(Buffer.from('010203', 'hex'));
    r.u16le();
    const e = err(() => r.u32be());
    expect(e.code).toBe('ERR_INCOMPLETE');
    expect(e.offset).toBe(2);
    expect(r.offset).toBe(2); // nothing consumed by the failed read
  });

  it('fails a read past a nested bound with ERR_OVERRUN', () => {
    const r = new WireReader(bytes);
    const prev = r.limit(3);
    r.u16be();
    expect(err(() => r.u16be()).code).toBe('ERR_OVERRUN');
    r.restore(prev);
    expect(r.u16be()).toBe(0x0304);
  });

  it('a bound past the input is ERR_INCOMPLETE, past its parent bound ERR_OVERRUN', () => {
    const r = new WireReader(bytes);
    expect(err(() => r.limit(9)).code).toBe('ERR_INCOMPLETE');
    r.limit(4);
    expect(err(() => r.limit(5)).code).toBe('ERR_OVERRUN');
  });

  it('checks length limits before touching the bytes', () => {
    const r = new WireReader(bytes, { maxStringBytes: 4, maxBytesLength: 4 });
    expect(err(() => r.string(5)).code).toBe('ERR_TOO_LARGE');
    expect(err(() => r.bytes(1_000_000)).code).toBe('ERR_TOO_LARGE');
  });

  it('enforces strict bools and nesting depth', () => {
    const r = new WireReader(Buffer.from('000102', 'hex'), { maxDepth: 2 });
    expect(r.bool()).toBe(false);
    expect(r.bool()).toBe(true);
    expect(err(() => r.bool()).code).toBe('ERR_BAD_VALUE');
    r.enter();
    r.enter();
    expect(err(() => r.enter()).code).toBe('ERR_TOO_DEEP');
  });

  it('validates UTF-8 and returns byte arrays as views', () => {
    const r = new WireReader(Buffer.from('c3a9ff', 'hex'));
    expect(r.string(2)).toBe('é');
    expect(err(() => r.string(1)).code).toBe('ERR_BAD_STRING');
    const src = Buffer.from('aabbcc', 'hex');
    const view = new WireReader(src).bytes(2);
    src[0] = 0x11;
    expect(view[0]).toBe(0x11);
  });

  it('never throws anything but DecodeError, whatever the reads and input', () => {
    const ops = [
      'u8',
      'u16le',
      'u16be',
      'u24be',
      'u32le',
      'i32be',
      'u64be',
      'f32le',
      'f64be',
      'bool',
    ] as const;
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 16 }),
        fc.array(fc.constantFrom(...ops), { maxLength: 10 }),
        (input, seq) => {
          const r = new WireReader(input);
          for (const op of seq) {
            try {
              r[op]();
            } catch (e) {
              expect(e).toBeInstanceOf(DecodeError);
            }
            expect(r.offset).toBeLessThanOrEqual(input.length);
          }
        },
      ),
    );
  });
});

describe('WireWriter', () => {
  it('writes each width in the byte order the call names', () => {
    const w = new WireWriter();
    w.u16le(0x0102);
    w.u16be(0x0102);
    w.u32le(0x01020304);
    w.u32be(0x01020304);
    w.i32le(-1);
    w.u64be(1n);
    w.f32le(1.5);
    expect(w.view().toString('hex')).toBe(
      '0201010204030201010203 04ffffffff00000000000000010000c03f'.replace(/\s/g, ''),
    );
  });

  it('reuses its buffer: reset rewinds without zero-filling and without reallocating', () => {
    const w = new WireWriter({ initialCapacity: 16 });
    w.u32be(0xdeadbeef);
    const buffer = w.buf;
    w.reset();
    expect(w.offset).toBe(0);
    expect(w.buf).toBe(buffer);
    expect(buffer.readUInt32BE(0)).toBe(0xdeadbeef); // old contents left in place
    w.u8(1);
    expect(w.view()).toEqual(Buffer.from([1]));
  });

  it('grows when needed and keeps what was written', () => {
    const w = new WireWriter({ initialCapacity: 2 });
    for (let i = 0; i < 100; i++) w.u8(i);
    expect(w.offset).toBe(100);
    expect(w.toBuffer()[99]).toBe(99);
  });

  it('refuses to grow past maxBytes', () => {
    const w = new WireWriter({ initialCapacity: 4, maxBytes: 8 });
    w.u32be(1);
    w.u32be(2);
    expect(() => w.u8(3)).toThrow(/exceed 8 bytes/);
  });

  it('back-patches reserved sizes', () => {
    const w = new WireWriter();
    const at = w.reserve(4);
    w.string('hello');
    w.patchU32be(at, w.offset - at - 4);
    expect(w.view().toString('hex')).toBe('0000000568656c6c6f');
  });
});
