/** The wire tap's limits: armed only while read, per-second sampling, ring size, message cut, masking. */
import { describe, expect, it } from 'vitest';
import { wireMessageJson } from '../../src/core/admin/wire-json.js';
import { ConfigError } from '../../src/core/errors.js';
import { WIRE_TAP_DEFAULTS, WireTap } from '../../src/core/wire-tap.js';
import { elapse, waitFor } from '../helpers/wait.js';

describe('WireTap', () => {
  it('records nothing until armed, and disarms armedForMs after the last read', async () => {
    let armedEvents: boolean[] = [];
    const tap = new WireTap({ armedForMs: 100 });
    tap.onArmedChange((a) => armedEvents.push(a));
    tap.record('client', 1, 'tcp', Buffer.from('abc'));
    expect(tap.seen).toBe(0);
    expect(tap.since(0, 10)).toEqual([]);
    tap.arm();
    expect(tap.armed).toBe(true);
    tap.record('client', 1, 'tcp', Buffer.from('abc'));
    expect(tap.seen).toBe(1);
    await elapse(60, 'part of armedForMs passes before the next read');
    tap.arm(); // a read keeps it armed
    await elapse(60, 'more than armedForMs since the first read, less since the second');
    expect(tap.armed).toBe(true);
    await waitFor(() => !tap.armed, { what: 'the tap to disarm armedForMs after the last read' });
    expect(armedEvents).toEqual([true, false]);
    armedEvents = [];
    tap.close();
  });

  it('copies at most ratePerSecond messages a second, counting the rest as seen', () => {
    let now = 1_000_000;
    const tap = new WireTap({ ratePerSecond: 3, now: () => now });
    tap.arm();
    for (let i = 0; i < 10; i++) tap.record('client', null, 'udp', Buffer.from([i]));
    expect(tap.seen).toBe(10);
    expect(tap.sampled).toBe(3);
    now += 1000;
    for (let i = 10; i < 20; i++) tap.record('server', 'c', 'udp', Buffer.from([i]));
    expect(tap.sampled).toBe(6);
    expect(tap.since(0, 100).map((m) => m.bytes[0])).toEqual([0, 1, 2, 10, 11, 12]);
    tap.close();
  });

  it('keeps the last `capacity` messages, pages with after/limit, and cuts long ones at maxBytes', () => {
    let now = 0;
    const tap = new WireTap({ capacity: 5, ratePerSecond: 1000, maxBytes: 8, now: () => now });
    tap.arm();
    for (let i = 0; i < 12; i++) {
      now += 1;
      tap.record('client', i, 'tcp', Buffer.alloc(i + 1, i));
    }
    const all = tap.since(0, 100);
    expect(all.map((m) => m.seq)).toEqual([8, 9, 10, 11, 12]);
    expect(tap.since(10, 100).map((m) => m.seq)).toEqual([11, 12]);
    expect(tap.since(0, 2).map((m) => m.seq)).toEqual([8, 9]);
    const last = all[4]!;
    expect(last).toMatchObject({ length: 12, truncated: true, connection: '11', transport: 'tcp' });
    expect(last.bytes).toHaveLength(8);
    expect(all[0]).toMatchObject({ length: 8, truncated: false });
    // A copy: changing the source afterwards changes nothing kept.
    const src = Buffer.from('hello world');
    tap.record('server', 1, 'tcp', src, 0, 5);
    src.fill(0);
    expect(tap.since(12, 1)[0]!.bytes.toString()).toBe('hello');
    tap.close();
  });

  it('masks secrets when copying and when decoding', () => {
    const tap = new WireTap({
      maskSecrets: (b) => b.fill(0, 0, 4),
    });
    tap.arm();
    tap.record('client', 1, 'tcp', Buffer.from('SECRpayload-with-password-hunter22'));
    const [m] = tap.since(0, 1);
    expect(m!.bytes.subarray(0, 4)).toEqual(Buffer.alloc(4));
    const json = wireMessageJson(m!, () => ({ type: 'login', user: 'bob', password: 'hunter22' }));
    expect(json.fields).toEqual({ type: 'login', user: 'bob', password: '<redacted>' });
    expect(json.name).toBe('login');
    expect(json.hex).not.toContain(Buffer.from('hunter22').toString('hex'));
    const failed = wireMessageJson(m!, () => {
      throw new Error('bad bytes');
    });
    expect(failed).toMatchObject({ fields: null, name: null, error: 'bad bytes' });
    tap.close();
  });

  it('has documented defaults and refuses nonsense limits', () => {
    const tap = new WireTap();
    expect([tap.capacity, tap.ratePerSecond, tap.maxBytes, tap.armedForMs]).toEqual([
      1000, 200, 4096, 10_000,
    ]);
    expect(WIRE_TAP_DEFAULTS).toMatchObject({ capacity: 1000, ratePerSecond: 200, maxBytes: 4096 });
    expect(() => new WireTap({ capacity: 0 })).toThrow(ConfigError);
    expect(() => new WireTap({ ratePerSecond: 1.5 })).toThrow(ConfigError);
  });
});
