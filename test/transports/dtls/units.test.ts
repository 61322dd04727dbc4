import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CookieJar } from '../../../src/transports/dtls/cookie.js';
import {
  HandshakeView,
  parseClientHello,
  parseClientKeyExchange,
  parseServerHello,
  Reassembler,
  readHandshake,
} from '../../../src/transports/dtls/handshake.js';
import { prf } from '../../../src/transports/dtls/prf.js';
import { RecordView, ReplayWindow, readRecord } from '../../../src/transports/dtls/record.js';
import { DecodeError } from '../../../src/wire/errors.js';
import { hasProgram, IN_CI } from './helpers.js';

describe('ReplayWindow', () => {
  it('agrees with a set-based model of RFC 6347 §4.1.2.6 for any arrival order', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.nat(200), fc.nat(2 ** 48 - 1)), { maxLength: 300 }), (seqs) => {
        const w = new ReplayWindow();
        const seen = new Set<number>();
        let highest = -1;
        for (const seq of seqs) {
          const fresh = seq > highest || (highest - seq < 64 && !seen.has(seq));
          expect(w.isFresh(seq)).toBe(fresh);
          if (fresh) {
            w.mark(seq);
            seen.add(seq);
            highest = Math.max(highest, seq);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('refuses a number exactly 64 behind the highest and accepts 63 behind', () => {
    const w = new ReplayWindow();
    w.mark(100);
    expect(w.isFresh(36)).toBe(false);
    expect(w.isFresh(37)).toBe(true);
    w.mark(37);
    expect(w.isFresh(37)).toBe(false);
    w.mark(132); // shift by 32 exactly keeps 100 and 37 (now 95 behind: outside)
    expect(w.isFresh(100)).toBe(false);
    expect(w.isFresh(101)).toBe(true);
  });
});

describe('Reassembler', () => {
  it('rebuilds a message from any overlapping, reordered fragmentation', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 1, maxLength: 2000 }),
        fc.array(fc.tuple(fc.nat(), fc.nat()), { minLength: 1, maxLength: 20 }),
        (bytes, cuts) => {
          const body = Buffer.from(bytes);
          // Fragments covering the message: random pieces plus a covering sequence, shuffled.
          const pieces: Array<[number, number]> = cuts.map(([a, b]) => {
            const start = a % body.length;
            return [start, 1 + (b % (body.length - start))];
          });
          for (let at = 0; at < body.length; at += 300) pieces.push([at, Math.min(300, body.length - at)]);
          pieces.sort((x, y) => ((x[0] * 7 + x[1]) % 13) - ((y[0] * 7 + y[1]) % 13));
          const r = new Reassembler(4096);
          const hv = new HandshakeView();
          let result: Buffer | undefined;
          for (const [offset, length] of pieces) {
            const h = Buffer.alloc(12 + length);
            h[0] = 16;
            h.writeUIntBE(body.length, 1, 3);
            h.writeUInt16BE(2, 4);
            h.writeUIntBE(offset, 6, 3);
            h.writeUIntBE(length, 9, 3);
            body.copy(h, 12, offset, offset + length);
            readHandshake(h, 0, h.length, hv);
            const done = r.add(h, hv);
            if (done !== undefined) {
              result = done;
              break;
            }
          }
          expect(result).toEqual(body);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('refuses a declared length over its bound before allocating', () => {
    const r = new Reassembler(4096);
    const h = Buffer.alloc(12 + 10);
    h[0] = 16;
    h.writeUIntBE(0xffffff, 1, 3);
    h.writeUIntBE(0, 6, 3);
    h.writeUIntBE(10, 9, 3);
    const hv = new HandshakeView();
    readHandshake(h, 0, h.length, hv);
    expect(() => r.add(h, hv)).toThrow(DecodeError);
  });
});

describe('parsers', () => {
  it('arbitrary bytes give only DecodeError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => {
        const b = Buffer.from(bytes);
        for (const parse of [parseClientHello, parseServerHello, parseClientKeyExchange]) {
          try {
            parse(b);
          } catch (e) {
            expect(e).toBeInstanceOf(DecodeError);
          }
        }
        try {
          readHandshake(b, 0, b.length, new HandshakeView());
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
        const rv = new RecordView();
        let at = 0;
        while (at < b.length && readRecord(b, at, rv) === undefined) {
          expect(rv.end).toBeLessThanOrEqual(b.length);
          at = rv.end;
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('CookieJar', () => {
  const before = Buffer.from('hello-before-cookie');
  const after = Buffer.from('hello-after-cookie');

  it('binds a cookie to the address, port and hello, and accepts the previous secret only', () => {
    const jar = new CookieJar(1000, 0);
    const cookie = jar.make('127.0.0.1', 5000, before, after, 10);
    expect(cookie).toHaveLength(32);
    expect(jar.verify(cookie, '127.0.0.1', 5000, before, after, 20)).toBe(true);
    expect(jar.verify(cookie, '127.0.0.1', 5001, before, after, 20)).toBe(false);
    expect(jar.verify(cookie, '127.0.0.2', 5000, before, after, 20)).toBe(false);
    expect(jar.verify(cookie, '127.0.0.1', 5000, Buffer.from('other'), after, 20)).toBe(false);
    // One rotation later: made with what is now the previous secret, still good.
    expect(jar.verify(cookie, '127.0.0.1', 5000, before, after, 1500)).toBe(true);
    // A second rotation: too old.
    expect(jar.verify(cookie, '127.0.0.1', 5000, before, after, 2600)).toBe(false);
    expect(jar.verify(cookie.subarray(0, 31), '127.0.0.1', 5000, before, after, 2600)).toBe(false);
  });

  it('after a long silence both secrets are new', () => {
    const jar = new CookieJar(1000, 0);
    const cookie = jar.make('127.0.0.1', 5000, before, after, 900);
    expect(jar.verify(cookie, '127.0.0.1', 5000, before, after, 5000)).toBe(false);
  });
});

// The PRF against OpenSSL's own TLS 1.2 PRF (its `kdf` command), an independent implementation.
describe.runIf(hasProgram('openssl') || IN_CI)('TLS 1.2 PRF', () => {
  for (const [hash, digest] of [
    ['sha256', 'SHA256'],
    ['sha384', 'SHA384'],
  ] as const) {
    it(`P_${hash} matches openssl kdf TLS1-PRF`, () => {
      fc.assert(
        fc.property(
          fc.uint8Array({ minLength: 1, maxLength: 132 }),
          fc.uint8Array({ minLength: 1, maxLength: 64 }),
          fc.integer({ min: 1, max: 200 }),
          (secret, seed, length) => {
            const label = 'key expansion';
            const ours = prf(hash, Buffer.from(secret), label, Buffer.from(seed), length);
            const theirs = execFileSync('openssl', [
              'kdf',
              '-keylen',
              String(length),
              '-kdfopt',
              `digest:${digest}`,
              '-kdfopt',
              `hexsecret:${Buffer.from(secret).toString('hex')}`,
              '-kdfopt',
              `hexseed:${Buffer.concat([Buffer.from(label), Buffer.from(seed)]).toString('hex')}`,
              'TLS1-PRF',
            ])
              .toString()
              .trim()
              .replaceAll(':', '')
              .toLowerCase();
            expect(ours.toString('hex')).toBe(theirs);
          },
        ),
        { numRuns: 15 },
      );
    });
  }
});
