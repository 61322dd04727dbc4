/**
 * PRUDP inside the inspector: a tcpdump capture of an RMC session over PRUDP (checksums with the
 * access key, RC4 and zlib payloads, a reply large enough to be fragmented), decoded with
 * `--access-key`: every packet, and each whole RMC message once, in order, from the right side.
 */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RmcClient } from '../../src/protocols/rmc/index.js';
import { EchoProtocol, startPrudp } from '../protocols/rmc/prudp-helpers.js';
import { haveProgram, inspectJson, Tcpdump, tempDir } from './helpers.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');
const KEY = 'yl4NG7qZ';

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

describe('inspect: PRUDP', () => {
  it('decodes packets, joins fragments and decodes the RMC messages with --access-key', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const f = await startPrudp();
    cleanups.push(() => f.close());
    const dump = await Tcpdump.start(`udp port ${f.port}`, path.join(tempDir(), 'prudp.pcap'));
    cleanups.push(() => dump.kill());
    const c = await RmcClient.connect({
      host: '127.0.0.1',
      port: f.port,
      transport: 'prudp',
      accessKey: KEY,
      timeoutMs: 20_000,
    });
    cleanups.push(() => c.close());
    const echo = await c.call(EchoProtocol, 'Echo', { data: Buffer.from('hello prudp') });
    expect(echo.data.toString()).toBe('hello prudp');
    const sized = await c.call(EchoProtocol, 'Sized', { n: 5000, tag: 7 });
    expect(sized.data.length).toBe(5000);
    await c.close();
    await dump.stop();

    const records = inspectJson(dump.file, ['--port', `${f.port}/udp=prudp`, '--access-key', KEY]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    expect(records.every((r) => r.protocol === 'prudp')).toBe(true);
    const packets = records.filter((r) => !['request', 'response', 'error'].includes(r.message.type));
    expect(packets[0]!.message).toMatchObject({ type: 'SYN' });
    expect(packets[0]!.direction).toBe('client');
    expect(packets.some((r) => r.message.type === 'CONNECT')).toBe(true);
    // The 5000-byte reply travelled in several DATA fragments.
    const fragments = packets.filter(
      (r) => r.direction === 'server' && r.message.type === 'DATA' && r.message.fragmentId > 0,
    );
    expect(fragments.length).toBeGreaterThan(1);
    const rmc = records.filter((r) => ['request', 'response', 'error'].includes(r.message.type));
    expect(rmc.map((r) => [r.direction, r.message.type, r.message.method])).toEqual([
      ['client', 'request', expect.stringContaining('Echo')],
      ['server', 'response', expect.stringContaining('Echo')],
      ['client', 'request', expect.stringContaining('Sized')],
      ['server', 'response', expect.stringContaining('Sized')],
    ]);
    // Echo is not a built-in method, so its results are hex: they hold the bytes sent back.
    expect(rmc[1]!.message.results).toContain(Buffer.from('hello prudp').toString('hex'));
    expect(rmc[3]!.message.results).toContain(sized.data.toString('hex'));

    // Without the key nothing is guessed: one clear error for the flow.
    const bare = inspectJson(dump.file, ['--port', `${f.port}/udp=prudp`]);
    expect(bare.map((r) => r.error?.code)).toEqual(['ERR_PRUDP_NEEDS_ACCESS_KEY']);
  });
});
