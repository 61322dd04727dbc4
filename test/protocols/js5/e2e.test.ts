import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { openStore } from '../../../src/protocols/js5/cache/store.js';
import { downloadCache } from '../../../src/protocols/js5/client.js';
import { demoCache, startServer, tempDir } from './helpers.js';

describe('end to end', () => {
  const servers: { close(): Promise<void> }[] = [];
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
  });

  test.each([
    ['530', 16 * 1024, 77],
    ['osrs', 16 * 1024, 0],
    ['435', 16 * 1024, 0],
    ['530', 5, 0],
    ['530', 3, 200],
  ] as const)(
    'the client downloads the whole demo cache byte-identical (%s, slices of %i bytes, xor %i)',
    async (profile, sliceBytes, xorKey) => {
      const { server } = await startServer(profile, { sliceBytes });
      servers.push(server);
      const out = path.join(tempDir(), 'dl');
      const summary = await downloadCache({
        host: '127.0.0.1',
        port: server.port,
        build: server.build,
        profile,
        out,
        xorKey,
      });
      expect(summary.downloaded).toBe(summary.groups);
      const src = openStore(demoCache());
      const dst = openStore(out);
      for (const a of src.archives()) {
        const groups = src.list(a);
        expect(dst.list(a)).toEqual(groups);
        for (const g of groups) expect(dst.read(a, g)!.equals(src.read(a, g)!)).toBe(true);
      }
      src.close();
      dst.close();
      // A second run resumes: everything is already there.
      const again = await downloadCache({
        host: '127.0.0.1',
        port: server.port,
        build: server.build,
        profile,
        out,
      });
      expect(again.skipped).toBe(again.groups);
      expect(again.downloaded).toBe(0);
    },
  );

  test('DIGESTS master index: served and checked end to end', async () => {
    const { server } = await startServer('530', { masterIndexFormat: 'digests' });
    servers.push(server);
    const out = path.join(tempDir(), 'dl');
    const summary = await downloadCache({
      host: '127.0.0.1',
      port: server.port,
      build: 530,
      profile: '530',
      out,
      masterIndexFormat: 'digests',
    });
    expect(summary.downloaded).toBe(summary.groups);
  });

  test('a partial cache is resumed: only the missing and damaged groups are fetched', async () => {
    const { server } = await startServer('530');
    servers.push(server);
    const out = path.join(tempDir(), 'dl');
    await downloadCache({
      host: '127.0.0.1',
      port: server.port,
      build: 530,
      profile: '530',
      out,
      kind: 'flat',
    });
    const store = openStore(out, { writable: true });
    store.remove(2, 3);
    const damaged = Buffer.from(store.read(0, 5)!);
    damaged[6]! ^= 0xff;
    store.write(0, 5, damaged);
    store.close();
    const again = await downloadCache({
      host: '127.0.0.1',
      port: server.port,
      build: 530,
      profile: '530',
      out,
    });
    expect(again.downloaded).toBe(2);
    const src = openStore(demoCache());
    const dst = openStore(out);
    expect(dst.read(2, 3)!.equals(src.read(2, 3)!)).toBe(true);
    expect(dst.read(0, 5)!.equals(src.read(0, 5)!)).toBe(true);
    src.close();
    dst.close();
  });
});
