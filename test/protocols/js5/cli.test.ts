import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { BIN as bin, ROOT as root, runCli as run } from '../../helpers/cli.js';
import { tempDir } from './helpers.js';

// The CLI is built once for the whole run by test/global-setup.ts.

describe('gamewire js5 (spawned)', () => {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
  });

  test('cache create-demo, verify and info; a damaged cache fails verify with exit 1', () => {
    const dir = path.join(tempDir(), 'demo');
    const created = run(['js5', 'cache', 'create-demo', dir]);
    expect(created.code).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ archives: 6, groups: 146 });
    const verified = run(['js5', 'cache', 'verify', dir]);
    expect(verified.code).toBe(0);
    expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true, groups: 146, problems: [] });
    const info = JSON.parse(run(['js5', 'cache', 'info', dir]).stdout);
    expect(info.kind).toBe('disk');
    expect(info.archives.map((a: { archive: number }) => a.archive)).toEqual([0, 1, 2, 3, 4, 6]);
    expect(info.masterIndex).toHaveLength(7);
    expect(info.masterIndex[5]).toEqual({ archive: 5, checksum: 0, version: 0 });
    // Flip one byte of a group's data in the dat2 file (sector 1 holds archive 0 group 0).
    const dat = path.join(dir, 'main_file_cache.dat2');
    const bytes = fs.readFileSync(dat);
    bytes[520 + 8 + 6]! ^= 0xff;
    fs.writeFileSync(dat, bytes);
    const bad = run(['js5', 'cache', 'verify', dir]);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout).problems).toHaveLength(1);
    expect(JSON.parse(bad.stderr.trim()).error.code).toBe('ERR_JS5_VERIFY');
    expect(run(['js5', 'cache', 'create-demo', dir]).code).toBe(2);
  });

  test('decode/encode js5 round trip, decode-only formats, and errors', () => {
    const up = run(['decode', 'js5', '--from', 'client', '--hex', '0f00000212 06000003 01ff00ff 00010002']);
    expect(up.code).toBe(0);
    const msgs = JSON.parse(up.stdout);
    expect(msgs[0]).toEqual({ type: 'handshake', build: 530 });
    expect(msgs[3]).toEqual({ type: 'prefetch', archive: 1, group: 2 });
    const enc = run(['encode', 'js5', '--from', 'client', '--json', up.stdout]);
    expect(enc.stdout.trim()).toBe('0f0000021206000003' + '01ff00ff00010002');
    const down = run(['decode', 'js5', '--from', 'server', '--hex', '02000380000000074f70656e525332']);
    expect(JSON.parse(down.stdout)).toEqual({
      type: 'response',
      archive: 2,
      group: 3,
      prefetch: true,
      compression: 0,
      data: '4f70656e525332',
    });
    expect(run(['encode', 'js5', '--from', 'server', '--json', down.stdout]).stdout.trim()).toBe(
      '02000380000000074f70656e525332',
    );
    const idx = run([
      'decode',
      'js5-index',
      '--hex',
      '05 01 0001 0000 05e918d2 01234567 89abcdef 0001 0000 06c11b92',
    ]);
    expect(JSON.parse(idx.stdout).groups[0]).toMatchObject({
      id: 0,
      nameHash: 0x05e918d2,
      files: [{ id: 0, nameHash: 0x06c11b92 }],
    });
    const master = run([
      'decode',
      'js5-master-index',
      '--variant',
      'original',
      '--hex',
      '00 0000000c 000000010000000300000005',
    ]);
    expect(JSON.parse(master.stdout).entries.map((e: { checksum: number }) => e.checksum)).toEqual([1, 3, 5]);
    const short = run(['decode', 'js5', '--from', 'client', '--hex', '0102']);
    expect(short.code).toBe(1);
    expect(JSON.parse(short.stderr.trim()).error.code).toBe('ERR_INCOMPLETE');
    const badMarker = run([
      'decode',
      'js5',
      '--from',
      'server',
      '--hex',
      `00000000000001fd${'00'.repeat(504)}fe${'00'.repeat(5)}`,
    ]);
    expect(badMarker.code).toBe(1);
    expect(JSON.parse(badMarker.stderr.trim()).error).toMatchObject({
      code: 'ERR_JS5_BAD_MARKER',
      offset: 512,
    });
    expect(run(['encode', 'js5-container', '--json', '{}']).code).toBe(2);
  });

  test('serve js5 on port 0 (demo cache generated into --data-dir), download it, verify it, stop on SIGTERM', async () => {
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
    expect(fs.existsSync(path.join(data, 'js5-demo-cache', 'main_file_cache.idx255'))).toBe(true);
    const dl = path.join(tempDir(), 'dl');
    const got = run(['js5', 'download', '--port', String(port), '--out', dl, '--xor', '9']);
    expect(got.code).toBe(0);
    expect(JSON.parse(got.stdout)).toMatchObject({ groups: 146, downloaded: 146 });
    expect(JSON.parse(run(['js5', 'cache', 'verify', dl]).stdout).ok).toBe(true);
    const wrongBuild = run([
      'js5',
      'download',
      '--port',
      String(port),
      '--out',
      path.join(tempDir(), 'x'),
      '--build',
      '400',
    ]);
    expect(wrongBuild.code).toBe(1);
    expect(JSON.parse(wrongBuild.stderr.trim()).error.code).toBe('ERR_JS5_HANDSHAKE');
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
