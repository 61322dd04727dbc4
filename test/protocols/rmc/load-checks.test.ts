/**
 * How `gamewire load rmc` checks a Register answer: the connection's first answer gives its shape
 * (result, connection id, the public URL but for the call's number), and every later answer must
 * match it with its own number. Flipping any single bit of the result, the connection id or any
 * character of the URL is a violation (`corrupt`, or `mismatched` when the flip lands in the
 * number). load-corrupt.test.ts shows it through a real server and a corrupting link.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type AnswerShape,
  answerShape,
  checkAnswer,
  type RegisterAnswer,
} from '../../../src/protocols/rmc/load.js';
import { RESULT_SUCCESS } from '../../../src/protocols/rmc/types.js';

/** The URL the generator registers (load.ts's stationUrlFor). */
const sentUrl = (index: number, seq: number) =>
  `prudp:/address=127.0.0.1;port=${5000 + (index % 50_000)};sid=15;type=2;seq=${seq}`;

const connection = fc.record({
  index: fc.integer({ min: 0, max: 100_000 }),
  address: fc.ipV4(),
  port: fc.integer({ min: 1, max: 65535 }),
  pid: fc.integer({ min: 0, max: 0xffffffff }),
  type: fc.constantFrom('2', '3'),
  seq: fc.integer({ min: 1, max: 10_000_000 }),
});

type Connection = { index: number; address: string; port: number; pid: number; type: string; seq: number };

/** The server's answer to call `seq`: the client's URL with the address and port it sees. */
function answer(c: Connection, seq: number): RegisterAnswer {
  return {
    retval: RESULT_SUCCESS,
    pidConnectionID: c.pid,
    urlPublic: `prudp:/address=${c.address};port=${c.port};sid=15;type=${c.type};seq=${seq}`,
  };
}

function shapeOf(c: Connection): AnswerShape {
  const shape = answerShape(answer(c, 0), sentUrl(c.index, 0));
  if (typeof shape === 'string') throw new Error(shape);
  return shape;
}

describe('rmc load: Register answers', () => {
  it('the right answer passes; another call’s is mismatched', () => {
    fc.assert(
      fc.property(connection, (c) => {
        const shape = shapeOf(c);
        expect(checkAnswer(answer(c, c.seq), c.seq, shape)).toBeUndefined();
        expect(checkAnswer(answer(c, c.seq + 1), c.seq, shape)).toBe('mismatched');
      }),
    );
  });

  it('flipping any bit of the result or the connection id is corrupt', () => {
    fc.assert(
      fc.property(connection, fc.integer({ min: 0, max: 31 }), (c, bit) => {
        const shape = shapeOf(c);
        const a = answer(c, c.seq);
        const flip = (v: number) => (v ^ (1 << bit)) >>> 0;
        expect(checkAnswer({ ...a, retval: flip(a.retval) }, c.seq, shape)).toBe('corrupt');
        expect(checkAnswer({ ...a, pidConnectionID: flip(a.pidConnectionID) }, c.seq, shape)).toBe('corrupt');
      }),
    );
  });

  it('flipping any bit of any character of the URL is a violation (corrupt outside the number)', () => {
    fc.assert(
      fc.property(connection, (c) => {
        const shape = shapeOf(c);
        const a = answer(c, c.seq);
        const url = a.urlPublic;
        for (let i = 0; i < url.length; i++)
          for (let bit = 0; bit < 8; bit++) {
            const flipped =
              url.slice(0, i) + String.fromCharCode(url.charCodeAt(i) ^ (1 << bit)) + url.slice(i + 1);
            const fault = checkAnswer({ ...a, urlPublic: flipped }, c.seq, shape);
            expect(fault, `${flipped}`).toBeDefined();
            if (i < shape.head.length) expect(fault).toBe('corrupt');
          }
      }),
      { numRuns: 50 },
    );
  });

  it('a first answer that changed what the server echoes is refused', () => {
    const c: Connection = { index: 3, address: '10.0.0.1', port: 4000, pid: 7, type: '3', seq: 1 };
    const sent = sentUrl(c.index, 0);
    const first = answer(c, 0);
    expect(typeof answerShape(first, sent)).toBe('object');
    expect(answerShape({ ...first, retval: 0x80010001 }, sent)).toMatch(/^result/);
    expect(answerShape({ ...first, urlPublic: first.urlPublic.replace('sid=15', 'sid=14') }, sent)).toMatch(
      /public URL/,
    );
    expect(answerShape({ ...first, urlPublic: first.urlPublic.replace('type=3', 'type=1') }, sent)).toMatch(
      /public URL/,
    );
    expect(answerShape({ ...first, urlPublic: first.urlPublic.replace('sid=', 'sie=') }, sent)).toMatch(
      /public URL/,
    );
  });
});
