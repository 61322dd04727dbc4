/** rmc's registration limits, per address and per server, on the core token bucket. */
import { describe, expect, it } from 'vitest';
import { RegistrationLimiter } from '../../../src/protocols/rmc/protocols/rate-limit.js';

const HOUR = 3_600_000;

describe('RegistrationLimiter', () => {
  it('an address gets its hourly burst, then one more per hour / limit; others are counted apart', () => {
    const l = new RegistrationLimiter({ perIpPerHour: 4, perHour: 100 });
    const t = Date.now();
    expect([1, 2, 3, 4, 5].map(() => l.take('a', t))).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
      'address',
    ]);
    expect(l.take('b', t)).toBeUndefined();
    expect(l.take('a', t + HOUR / 4 - 1000)).toBe('address');
    expect(l.take('a', t + HOUR / 4 + 1000)).toBeUndefined();
  });

  it('a server refusal takes nothing from the address, and an address refusal nothing from the server', () => {
    const l = new RegistrationLimiter({ perIpPerHour: 2, perHour: 3 });
    const t = Date.now() + 1;
    expect(l.take('a', t)).toBeUndefined();
    expect(l.take('a', t)).toBeUndefined();
    expect(l.take('a', t)).toBe('address');
    expect(l.take('b', t)).toBeUndefined();
    expect(l.take('c', t)).toBe('server');
    // 'c' kept its own two: once the server has one again, 'c' gets it.
    expect(l.take('c', t + HOUR / 3 + 1000)).toBeUndefined();
  });

  it('0 turns a limit off; the addresses remembered stay bounded', () => {
    const off = new RegistrationLimiter({ perIpPerHour: 0, perHour: 0 });
    for (let i = 0; i < 1000; i++) expect(off.take('a')).toBeUndefined();
    expect(off.trackedAddresses).toBe(0);
    const l = new RegistrationLimiter({ perIpPerHour: 1, perHour: 0, maxTrackedAddresses: 10 });
    for (let i = 0; i < 100; i++) l.take(`10.0.0.${i}`);
    expect(l.trackedAddresses).toBe(10);
  });
});
