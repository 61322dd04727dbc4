/** TCP reassembly under reordering, duplication, overlap and loss (fast-check). */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TcpReassembler } from '../../src/inspect/tcp.js';

interface Out {
  chunks: { at: number; bytes: Buffer }[];
  gaps: { at: number; length: number }[];
}

function collector(): { out: Out; sink: ConstructorParameters<typeof TcpReassembler>[0] } {
  const out: Out = { chunks: [], gaps: [] };
  return {
    out,
    sink: {
      data: (bytes, at) => out.chunks.push({ at, bytes: Buffer.from(bytes) }),
      gap: (at, length) => out.gaps.push({ at, length }),
    },
  };
}

/** Segments [start, end) of `stream`, cut at the given points. */
function cut(stream: Buffer, points: number[]): { at: number; len: number }[] {
  const bounds = [...new Set([0, ...points.map((p) => p % (stream.length + 1)), stream.length])].sort(
    (a, b) => a - b,
  );
  const segs: { at: number; len: number }[] = [];
  for (let i = 0; i + 1 < bounds.length; i++) segs.push({ at: bounds[i]!, len: bounds[i + 1]! - bounds[i]! });
  return segs;
}

const arbCase = fc.record({
  stream: fc.uint8Array({ minLength: 1, maxLength: 3000 }).map((a) => Buffer.from(a)),
  points: fc.array(fc.nat(4000), { maxLength: 40 }),
  isn: fc.nat(0xffffffff),
  order: fc.array(fc.nat(), { maxLength: 80 }),
  duplicates: fc.array(fc.record({ which: fc.nat(), from: fc.nat(), len: fc.nat(600) }), { maxLength: 10 }),
});

function shuffle<T>(items: T[], keys: number[]): T[] {
  return items
    .map((item, i) => ({ item, k: keys[i % Math.max(1, keys.length)] ?? i }))
    .sort((a, b) => a.k - b.k)
    .map((x) => x.item);
}

describe('TCP reassembly', () => {
  it('delivers every byte exactly once, in order, whatever the order, duplicates and overlaps (sequence wrap included)', () => {
    fc.assert(
      fc.property(arbCase, ({ stream, points, isn, order, duplicates }) => {
        const { out, sink } = collector();
        const r = new TcpReassembler(sink);
        r.segment(isn, true, false, Buffer.alloc(0));
        const segs = cut(stream, points);
        // Duplicates and overlapping retransmissions of arbitrary ranges (same bytes).
        for (const d of duplicates) {
          const from = d.from % stream.length;
          segs.push({ at: from, len: Math.min(d.len, stream.length - from) });
        }
        for (const s of shuffle(segs, order)) {
          r.segment((isn + 1 + s.at) >>> 0, false, false, stream.subarray(s.at, s.at + s.len));
        }
        r.flush();
        expect(out.gaps).toEqual([]);
        let next = 0;
        for (const c of out.chunks) {
          expect(c.at).toBe(next);
          next += c.bytes.length;
        }
        expect(Buffer.concat(out.chunks.map((c) => c.bytes)).equals(stream)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('reports lost segments as gaps, never guesses their bytes, and delivers the rest intact', () => {
    fc.assert(
      fc.property(
        arbCase,
        fc.array(fc.boolean(), { maxLength: 40 }),
        ({ stream, points, isn, order }, lost) => {
          const { out, sink } = collector();
          const r = new TcpReassembler(sink);
          r.segment(isn, true, false, Buffer.alloc(0));
          const segs = cut(stream, points);
          const kept = segs.filter((_, i) => lost[i] !== true);
          for (const s of shuffle(kept, order)) {
            r.segment((isn + 1 + s.at) >>> 0, false, false, stream.subarray(s.at, s.at + s.len));
          }
          r.flush();
          // Chunks and gaps tile [0, end) without overlap; every delivered byte is the original.
          const pieces = [
            ...out.chunks.map((c) => ({ at: c.at, len: c.bytes.length, bytes: c.bytes as Buffer | null })),
            ...out.gaps.map((g) => ({ at: g.at, len: g.length, bytes: null as Buffer | null })),
          ].sort((a, b) => a.at - b.at);
          let next = 0;
          for (const p of pieces) {
            expect(p.at).toBe(next);
            if (p.bytes !== null) expect(p.bytes.equals(stream.subarray(p.at, p.at + p.len))).toBe(true);
            next += p.len;
          }
          // A gap never covers a byte that was captured.
          for (const g of out.gaps) {
            for (const s of kept) expect(s.at + s.len <= g.at || s.at >= g.at + g.length).toBe(true);
          }
          // Everything captured after the first loss is still delivered.
          const lastKept = kept.reduce((m, s) => Math.max(m, s.at + s.len), 0);
          expect(next).toBe(lastKept);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('declares a hole a gap as soon as the peer acknowledges past it', () => {
    const { out, sink } = collector();
    const r = new TcpReassembler(sink);
    r.segment(1000, true, false, Buffer.alloc(0));
    r.segment(1001, false, false, Buffer.from('abc'));
    // 'def' is lost; 'ghi' held.
    r.segment(1007, false, false, Buffer.from('ghi'));
    expect(out.gaps).toEqual([]);
    r.acknowledged(1010);
    expect(out.gaps).toEqual([{ at: 3, length: 3 }]);
    expect(out.chunks.map((c) => c.bytes.toString())).toEqual(['abc', 'ghi']);
  });

  it('does not count the FIN as missing data when it is acknowledged', () => {
    const { out, sink } = collector();
    const r = new TcpReassembler(sink);
    r.segment(5, true, false, Buffer.alloc(0));
    r.segment(6, false, true, Buffer.from('xy'));
    r.acknowledged(9);
    expect(out.gaps).toEqual([]);
    expect(out.chunks.map((c) => c.bytes.toString())).toEqual(['xy']);
  });

  it('bounds the bytes held out of order: the oldest hole becomes a gap', () => {
    const { out, sink } = collector();
    const r = new TcpReassembler(sink, { maxOutOfOrderBytes: 10 });
    r.segment(0, true, false, Buffer.alloc(0));
    r.segment(1 + 5, false, false, Buffer.alloc(6, 1));
    expect(out.gaps).toEqual([]);
    r.segment(1 + 20, false, false, Buffer.alloc(6, 2));
    expect(out.gaps[0]).toEqual({ at: 0, length: 5 });
    expect(out.chunks[0]!.at).toBe(5);
  });

  it('starts at the first data segment when the SYN was not captured', () => {
    const { out, sink } = collector();
    const r = new TcpReassembler(sink);
    r.segment(0xfffffffe, false, false, Buffer.from('abcd'));
    r.segment(2, false, false, Buffer.from('ef'));
    expect(Buffer.concat(out.chunks.map((c) => c.bytes)).toString()).toBe('abcdef');
  });
});
