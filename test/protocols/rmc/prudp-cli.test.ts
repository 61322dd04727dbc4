/** `gamewire rmc call --transport prudp` against a spawned `gamewire serve rmc`, both profiles. */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BIN, errorOf, ROOT, runCli } from '../../helpers/cli.js';

let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function serve(args: string[]): Promise<number> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'gw-prudp-cli-'));
  const child: ChildProcess = spawn(
    process.execPath,
    [BIN, 'serve', 'rmc', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, ...args],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  cleanup.push(async () => {
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  });
  let out = '';
  return new Promise<number>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no udp endpoint: ${out}`)), 20_000);
    const on = (d: Buffer) => {
      out += d.toString();
      const m = /rmc udp 127\.0\.0\.1:(\d+)/.exec(out);
      if (m !== null) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    };
    child.stdout!.on('data', on);
    child.stderr!.on('data', on);
  });
}

/** runCli is synchronous; run it off the event loop's critical path with a small wrapper. */
function call(args: string[]) {
  return runCli(['rmc', 'call', '--host', '127.0.0.1', ...args]);
}

describe('gamewire rmc call --transport prudp', () => {
  it('hyperscape: ECDH CONNECT, then a typed call', async () => {
    const port = await serve(['--prudp-access-key', 'yl4NG7qZ']);
    const r = call([
      'CloudServersProtocol::GetDatacenters_V1',
      '--port',
      String(port),
      '--transport',
      'prudp',
      '--access-key',
      'yl4NG7qZ',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ method: 'CloudServersProtocol::GetDatacenters_V1*' });
  });

  it('classic: the Kerberos ladder with --user/--password, then SecureConnection::Register by id', async () => {
    const port = await serve([
      '--prudp-profile',
      'classic',
      '--prudp-access-key',
      'yl4NG7qZ',
      '--prudp-password',
      'pw',
    ]);
    // Register(List<StationURL> ["prudp:/sid=15"])
    const url = Buffer.from('prudp:/sid=15\0');
    const args = Buffer.concat([Buffer.from([1, 0, 0, 0, url.length, 0]), url]).toString('hex');
    const base = [
      '11::1',
      '--port',
      String(port),
      '--variant',
      'classic',
      '--transport',
      'prudp',
      '--access-key',
      'yl4NG7qZ',
      '--args',
      JSON.stringify(args),
    ];
    const ok = call([...base, '--user', 'sam', '--password', 'pw']);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    const results = Buffer.from(JSON.parse(ok.stdout).results, 'hex');
    expect(results.readUInt32LE(0)).toBe(0x00010001);
    // Without logging in, the secure protocol refuses.
    const anon = call(base);
    expect(anon.code).toBe(1);
    expect(errorOf(anon).code).toBe('ERR_RMC_FAILURE');
    // A wrong password cannot open the ticket.
    const wrong = call([...base, '--user', 'sam', '--password', 'nope']);
    expect(wrong.code).not.toBe(0);
  });

  it('--transport prudp without --access-key is a usage error', () => {
    const r = call(['CloudServersProtocol::GetDatacenters_V1', '--port', '9', '--transport', 'prudp']);
    expect(r.code).toBe(2);
  });
});
