/** Where `gamewire load` may send traffic, and how its address options are read. */
import { describe, expect, it } from 'vitest';
import {
  checkLocalAddresses,
  isLoopbackAddress,
  parseFromAddresses,
  parseHostPort,
  TargetPolicy,
} from '../../../src/core/load/target.js';

describe('the target rule', () => {
  it('knows loopback: 127.0.0.0/8, ::1 and IPv4-mapped loopback', () => {
    for (const a of ['127.0.0.1', '127.255.1.2', '::1', '[::1]', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.9'])
      expect(isLoopbackAddress(a), a).toBe(true);
    for (const a of [
      '10.0.0.1',
      '192.168.1.1',
      '0.0.0.0',
      '::',
      '::ffff:10.0.0.1',
      'fe80::1',
      '128.0.0.1',
      'localhost',
    ])
      expect(isLoopbackAddress(a), a).toBe(false);
  });

  it('allows loopback addresses and names that resolve only to loopback', async () => {
    const policy = new TargetPolicy({ owned: false });
    await expect(policy.allow('127.0.0.1')).resolves.toBeUndefined();
    await expect(policy.allow('127.3.4.5')).resolves.toBeUndefined();
    await expect(policy.allow('::1')).resolves.toBeUndefined();
    await expect(policy.allow('localhost')).resolves.toBeUndefined();
  });

  it('refuses any other address, naming the flag and where the address came from', async () => {
    const policy = new TargetPolicy({ owned: false });
    for (const host of ['10.1.2.3', '192.168.0.10', '0.0.0.0', '203.0.113.7', '::ffff:10.0.0.1']) {
      const err = await policy.allow(host, 'the allocation').catch((e: unknown) => e);
      expect(err, host).toMatchObject({ code: 'ERR_LOAD_TARGET', exitCode: 2 });
      expect((err as Error).message).toContain('--i-own-this-target');
      expect((err as Error).message).toContain('the allocation');
    }
  });

  it('refuses a name it cannot resolve, without sending anything', async () => {
    const err = await new TargetPolicy({ owned: false })
      .allow('no-such-host.invalid')
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_LOAD_TARGET' });
  });

  it('allows anything once the target is owned', async () => {
    const policy = new TargetPolicy({ owned: true });
    await expect(policy.allow('203.0.113.7')).resolves.toBeUndefined();
    await expect(policy.allow('no-such-host.invalid')).resolves.toBeUndefined();
  });
});

describe('address options', () => {
  it('reads --from lists and last-octet ranges', () => {
    expect(parseFromAddresses(['127.0.0.2-4', '127.0.1.1,::1'])).toEqual([
      '127.0.0.2',
      '127.0.0.3',
      '127.0.0.4',
      '127.0.1.1',
      '::1',
    ]);
    expect(() => parseFromAddresses(['127.0.0.9-2'])).toThrow(/range/);
    expect(() => parseFromAddresses(['somewhere'])).toThrow(/not an IP address/);
    expect(() => parseFromAddresses(['127.0.0.1-255', '127.0.1.1-255'], 300)).toThrow(/more than 300/);
  });

  it('checks that it can send from each address', async () => {
    await expect(checkLocalAddresses(['127.0.0.1', '127.9.9.9'])).resolves.toBeUndefined();
    // TEST-NET-3: never an address of this machine.
    await expect(checkLocalAddresses(['203.0.113.200'])).rejects.toMatchObject({ code: 'ERR_LOAD_FROM' });
  });

  it('splits HOST:PORT, [v6]:PORT and a bare host (the default port)', () => {
    expect(parseHostPort('127.0.0.1:9', 5)).toEqual({ host: '127.0.0.1', port: 9 });
    expect(parseHostPort('[::1]:9', 5)).toEqual({ host: '::1', port: 9 });
    expect(parseHostPort('::1', 5)).toEqual({ host: '::1', port: 5 });
    expect(parseHostPort('localhost', 5)).toEqual({ host: 'localhost', port: 5 });
    expect(() => parseHostPort('127.0.0.1:', 5)).toThrow(/HOST:PORT/);
    expect(() => parseHostPort('127.0.0.1:70000', 5)).toThrow(/1\.\.65535/);
    expect(() => parseHostPort(':80', 5)).toThrow(/no host/);
  });
});
