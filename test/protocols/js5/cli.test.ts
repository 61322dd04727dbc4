import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, test, vi } from 'vitest';
import { downloadCache } from '../../../src/protocols/js5/client.js';
import { BIN as bin, ROOT as root, runCliAsync } from '../../helpers/cli.js';
import { limited, tempDir } from './helpers.js';

/** The tests run concurrently: at most 3 commands at a time across them. */
const run = limited(3, runCliAsync);

// The CLI is built once for the whole run by test/global-setup.ts.

/**
 * Tests that spawn many commands (create-demo alone takes seconds on a loaded machine), and wait
 * their turn for the command limiter below: every test of the file gets this.
 */
const SPAWNS_TIMEOUT_MS = 180_000;
vi.setConfig({ testTimeout: SPAWNS_TIMEOUT_MS });

// Each test works in its own folders and servers: they run concurrently, and the commands within
// a test that do not need each other's results run at once.
describe.concurrent('gamewire js5 (spawned)', () => {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
  });

  test(
    'cache create-demo, verify and info; a damaged cache fails verify with exit 1',
    async () => {
      const dir = path.join(tempDir(), 'demo');
      const others = Promise.all([
        ...(
          [
            ['435', 13],
            ['osrs', 26],
          ] as const
        ).map(async ([profile, archives]) => {
          const d = path.join(tempDir(), `demo-${profile}`);
          const r = await run(['js5', 'cache', 'create-demo', d, '--profile', profile]);
          expect(JSON.parse(r.stdout)).toMatchObject({ profile, archives });
        }),
        (async () => {
          const r = await run(['js5', 'cache', 'create-demo', path.join(tempDir(), 'x'), '--profile', '999']);
          expect(r.code).toBe(2);
        })(),
      ]);
      const created = await run(['js5', 'cache', 'create-demo', dir]);
      expect(created.code).toBe(0);
      const summary = JSON.parse(created.stdout);
      expect(summary).toMatchObject({ profile: '530', archives: 28, groups: 212 });
      const [verified, infoRun] = await Promise.all([
        run(['js5', 'cache', 'verify', dir]),
        run(['js5', 'cache', 'info', dir]),
      ]);
      expect(verified.code).toBe(0);
      expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true, groups: 212, problems: [] });
      const info = JSON.parse(infoRun.stdout);
      expect(info.kind).toBe('disk');
      expect(info.archives.map((a: { archive: number }) => a.archive)).toEqual([...Array(28).keys()]);
      expect(info.masterIndex).toHaveLength(28);
      expect(info.masterIndex.filter((e: { checksum: number }) => e.checksum === 0)).toEqual([]);
      // One measure of bytes, with one name, in every command.
      expect(JSON.parse(verified.stdout).storedBytes).toBe(summary.storedBytes);
      expect(info.storedBytes).toBe(summary.storedBytes);
      expect(summary.unpackedBytes).toBeGreaterThan(0);
      await others;
      // Flip one byte of a group's data in the dat2 file (sector 1 holds archive 0 group 0).
      const dat = path.join(dir, 'main_file_cache.dat2');
      const bytes = fs.readFileSync(dat);
      bytes[520 + 8 + 6]! ^= 0xff;
      fs.writeFileSync(dat, bytes);
      const [bad, again] = await Promise.all([
        run(['js5', 'cache', 'verify', dir]),
        run(['js5', 'cache', 'create-demo', dir]),
      ]);
      expect(bad.code).toBe(1);
      expect(JSON.parse(bad.stdout).problems).toHaveLength(1);
      expect(JSON.parse(bad.stderr.trim()).error.code).toBe('ERR_JS5_VERIFY');
      expect(again.code).toBe(2);
    },
    SPAWNS_TIMEOUT_MS,
  );

  test('decode/encode js5 round trip, decode-only formats, and errors', async () => {
    const roundTrips = (async () => {
      const up = await run([
        'decode',
        'js5',
        '--from',
        'client',
        '--hex',
        '0f00000212 06000003 01ff00ff 00010002',
      ]);
      expect(up.code).toBe(0);
      const msgs = JSON.parse(up.stdout);
      expect(msgs[0]).toEqual({ type: 'handshake', build: 530 });
      expect(msgs[3]).toEqual({ type: 'prefetch', archive: 1, group: 2 });
      const enc = await run(['encode', 'js5', '--from', 'client', '--json', up.stdout]);
      expect(enc.stdout.trim()).toBe('0f0000021206000003' + '01ff00ff00010002');
    })();
    const serverRoundTrip = (async () => {
      const down = await run([
        'decode',
        'js5',
        '--from',
        'server',
        '--hex',
        '02000380000000074f70656e525332',
      ]);
      expect(JSON.parse(down.stdout)).toEqual({
        type: 'response',
        archive: 2,
        group: 3,
        prefetch: true,
        compression: 0,
        data: '4f70656e525332',
      });
      expect((await run(['encode', 'js5', '--from', 'server', '--json', down.stdout])).stdout.trim()).toBe(
        '02000380000000074f70656e525332',
      );
    })();
    const [idx, master, short, badMarker, container] = await Promise.all([
      run(['decode', 'js5-index', '--hex', '05 01 0001 0000 05e918d2 01234567 89abcdef 0001 0000 06c11b92']),
      run([
        'decode',
        'js5-master-index',
        '--variant',
        'original',
        '--hex',
        '00 0000000c 000000010000000300000005',
      ]),
      run(['decode', 'js5', '--from', 'client', '--hex', '0102']),
      run([
        'decode',
        'js5',
        '--from',
        'server',
        '--hex',
        `00000000000001fd${'00'.repeat(504)}fe${'00'.repeat(5)}`,
      ]),
      run(['encode', 'js5-container', '--json', '{}']),
    ]);
    expect(JSON.parse(idx.stdout).groups[0]).toMatchObject({
      id: 0,
      nameHash: 0x05e918d2,
      files: [{ id: 0, nameHash: 0x06c11b92 }],
    });
    expect(JSON.parse(master.stdout).entries.map((e: { checksum: number }) => e.checksum)).toEqual([1, 3, 5]);
    expect(short.code).toBe(1);
    expect(JSON.parse(short.stderr.trim()).error.code).toBe('ERR_INCOMPLETE');
    expect(badMarker.code).toBe(1);
    expect(JSON.parse(badMarker.stderr.trim()).error).toMatchObject({
      code: 'ERR_JS5_BAD_MARKER',
      offset: 512,
    });
    expect(container.code).toBe(2);
    await Promise.all([roundTrips, serverRoundTrip]);
  });

  test(
    'serve js5 on port 0 (demo cache generated into --data-dir), download it, verify it, stop on SIGTERM',
    async () => {
      const data = tempDir();
      const child = spawn(
        process.execPath,
        [
          bin,
          'serve',
          'js5',
          '--port',
          '0',
          '--host',
          '127.0.0.1',
          '--data-dir',
          data,
          '--log-level',
          'silent',
        ],
        {
          cwd: root,
        },
      );
      children.push(child);
      let out = '';
      const port = await new Promise<number>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no listen line: ${out}`)), 30_000);
        child.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /js5 tcp 127\.0\.0\.1:(\d+)/.exec(out);
          if (m) {
            clearTimeout(t);
            resolve(Number(m[1]));
          }
        });
      });
      expect(port).toBeGreaterThan(0);
      expect(fs.existsSync(path.join(data, 'js5-demo-cache-530-v2', 'main_file_cache.idx255'))).toBe(true);
      const dl = path.join(tempDir(), 'dl');
      const [got, wrongBuild] = await Promise.all([
        run(['js5', 'download', '--port', String(port), '--out', dl, '--xor', '9']),
        run([
          'js5',
          'download',
          '--port',
          String(port),
          '--out',
          path.join(tempDir(), 'x'),
          '--build',
          '400',
        ]),
      ]);
      expect(got.code).toBe(0);
      const downloaded = JSON.parse(got.stdout);
      expect(downloaded).toMatchObject({ archives: 28, groups: 212, downloaded: 212 });
      const check = JSON.parse((await run(['js5', 'cache', 'verify', dl])).stdout);
      expect(check.ok).toBe(true);
      expect(check.storedBytes).toBe(downloaded.storedBytes);
      expect(fs.existsSync(path.join(dl, 'gamewire-download.json'))).toBe(false);
      expect(wrongBuild.code).toBe(1);
      const refusal = JSON.parse(wrongBuild.stderr.trim()).error;
      expect(refusal.code).toBe('ERR_JS5_OUT_OF_DATE');
      // Which build the server wants, and what to pass: not "refused with status 6".
      expect(refusal.message).toMatch(/refused build 400/);
      expect(refusal.message).toMatch(/expects build 530; pass --build 530/);
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    },
    SPAWNS_TIMEOUT_MS,
  );

  /** Spawns `gamewire serve js5 …` on port 0 and resolves with its port. */
  async function serve(args: string[]): Promise<{ child: ChildProcess; port: number }> {
    const child = spawn(
      process.execPath,
      [bin, 'serve', 'js5', '--port', '0', '--host', '127.0.0.1', '--log-level', 'silent', ...args],
      { cwd: root },
    );
    children.push(child);
    let out = '';
    const port = await new Promise<number>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no listen line: ${out}`)), 30_000);
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /js5 tcp 127\.0\.0\.1:(\d+)/.exec(out);
        if (m) {
          clearTimeout(t);
          resolve(Number(m[1]));
        }
      });
    });
    return { child, port };
  }

  test(
    'verify never says ok for an empty folder, a wrong folder, or an interrupted download',
    async () => {
      const empty = tempDir();
      const wrong = tempDir();
      fs.writeFileSync(path.join(wrong, 'notes.txt'), 'not a cache');
      fs.mkdirSync(path.join(wrong, 'src'));
      const [r1, r2, wrongInfo, missing, { child, port }] = await Promise.all([
        run(['js5', 'cache', 'verify', empty]),
        run(['js5', 'cache', 'verify', wrong]),
        run(['js5', 'cache', 'info', wrong]),
        run(['js5', 'cache', 'verify', path.join(wrong, 'nope')]),
        // For the download cut off half way, below.
        serve([]),
      ]);
      expect(r1.code).toBe(1);
      expect(r1.stdout).not.toMatch(/"ok":true/);
      expect(JSON.parse(r1.stderr.trim()).error.code).toBe('ERR_JS5_EMPTY_CACHE');
      expect(r2.code).toBe(1);
      expect(JSON.parse(r2.stderr.trim()).error.code).toBe('ERR_JS5_EMPTY_CACHE');
      expect(wrongInfo.code).toBe(1);
      expect(missing.code).toBe(1);
      expect(JSON.parse(missing.stderr.trim()).error.code).toBe('ERR_JS5_NO_CACHE');

      // A download cut off half way: the server dies once the indexes are in.
      const dl = path.join(tempDir(), 'dl');
      await expect(
        downloadCache({
          host: '127.0.0.1',
          port,
          profile: '530',
          build: 530,
          out: dl,
          onTotal: () => child.kill('SIGKILL'),
        }),
      ).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_JS5_(NO_SERVER|CONNECTION)$/) });
      expect(fs.existsSync(path.join(dl, 'gamewire-download.json'))).toBe(true);
      const v = await run(['js5', 'cache', 'verify', dl]);
      expect(v.code).toBe(1);
      expect(v.stdout).not.toMatch(/"ok":true/);
      const err = JSON.parse(v.stderr.trim()).error;
      expect(err.code).toBe('ERR_JS5_INCOMPLETE');
      expect(err.message).toMatch(/did not finish.*gamewire js5 download/);
    },
    SPAWNS_TIMEOUT_MS,
  );

  test(
    'a server that lacks groups: every other group is downloaded, the missing ones are named (exit 1), and a later run fetches them',
    async () => {
      const cache = path.join(tempDir(), 'holes');
      expect((await run(['js5', 'cache', 'create-demo', cache, '--flat'])).code).toBe(0);
      // Two holes in one archive and one in another: each makes the server close the connection
      // (`--missing-group close`; with the default, drop, each would cost the downloader its
      // request timeout).
      const holes = ['2/20', '2/21', '5/2'];
      const saved = new Map<string, Buffer>();
      for (const h of holes) {
        const file = path.join(cache, ...`${h}.dat`.split('/'));
        saved.set(file, fs.readFileSync(file));
        fs.rmSync(file);
      }
      const { child, port } = await serve(['--cache', cache, '--missing-group', 'close']);
      const dl = path.join(tempDir(), 'dl');
      const got = await run(['js5', 'download', '--port', String(port), '--out', dl]);
      expect(got.code).toBe(1);
      const err = JSON.parse(got.stderr.trim()).error;
      expect(err.code).toBe('ERR_JS5_SERVER_MISSING');
      expect(err.message).toMatch(/would not send 3 group\(s\).*2\/20, 2\/21, 5\/2/);
      const summary = JSON.parse(got.stdout);
      expect(summary).toMatchObject({ groups: 212, downloaded: 209, skipped: 0 });
      expect(summary.missing).toEqual([
        { archive: 2, group: 20 },
        { archive: 2, group: 21 },
        { archive: 5, group: 2 },
      ]);
      // A finished download of what the server has: verify names exactly the holes.
      expect(fs.existsSync(path.join(dl, 'gamewire-download.json'))).toBe(false);
      const v = await run(['js5', 'cache', 'verify', dl]);
      expect(v.code).toBe(1);
      expect(JSON.parse(v.stderr.trim()).error.code).toBe('ERR_JS5_VERIFY');
      const problems = JSON.parse(v.stdout).problems as { archive: number; group: number; code: string }[];
      expect(problems.map((p) => `${p.archive}/${p.group} ${p.code}`)).toEqual(
        holes.map((h) => `${h} ERR_JS5_MISSING`),
      );
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      // The server's cache is mended (and served again); the same command fetches only what
      // was missing.
      for (const [file, bytes] of saved) fs.writeFileSync(file, bytes);
      const mended = await serve(['--cache', cache]);
      const again = await run(['js5', 'download', '--port', String(mended.port), '--out', dl]);
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout)).toMatchObject({ downloaded: 3, skipped: 209, missing: [] });
      expect((await run(['js5', 'cache', 'verify', dl])).code).toBe(0);
      mended.child.kill('SIGTERM');
    },
    SPAWNS_TIMEOUT_MS,
  );

  test('download refuses to write into a folder that is neither empty nor a cache', async () => {
    const dir = tempDir();
    fs.writeFileSync(path.join(dir, 'thesis.txt'), 'precious');
    const r = await run(['js5', 'download', '--port', '1', '--out', dir]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr.trim()).error.code).toBe('ERR_JS5_NOT_A_CACHE');
    expect(fs.readdirSync(dir)).toEqual(['thesis.txt']);
  });

  test('download from no server says so, and what to check', async () => {
    const r = await run(['js5', 'download', '--port', '1', '--out', path.join(tempDir(), 'none')]);
    expect(r.code).toBe(1);
    const err = JSON.parse(r.stderr.trim()).error;
    expect(err.code).toBe('ERR_JS5_NO_SERVER');
    expect(err.message).toMatch(/no server at 127\.0\.0\.1:1.*gamewire serve js5/);
  });
});
