/**
 * Publishing a generated state file into a data folder when several processes start together
 * (src/core/publish-file.ts): the helper alone, then real processes racing on one empty folder
 * for the Kerberos key, the signing key and the wss certificate pair, which must all end with
 * the first publisher's files, and `serve js5` processes racing to build the demo cache.
 */
import { execFile, spawn } from 'node:child_process';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import {
  copyFileSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { publishFile, publishFileSync } from '../../src/core/publish-file.js';
import { ensureSelfSignedCert } from '../../src/protocols/unity-relay/websocket.js';
import { BIN, cliEnv, ROOT } from '../helpers/cli.js';

const run = promisify(execFile);
const scratch = mkdtempSync(path.join(tmpdir(), 'gamewire-publish-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
let n = 0;
const freshDir = (): string => mkdtempSync(path.join(scratch, `d${n++}-`));
const modeOf = (file: string): number => statSync(file).mode & 0o777;

describe('publishFileSync / publishFile', () => {
  it('the first publish creates the file; a later one returns what is there and changes nothing', async () => {
    const dir = freshDir();
    const file = path.join(dir, 'state.key');
    const first = publishFileSync(file, 'first\n', { mode: 0o600 });
    expect(first).toEqual({ data: Buffer.from('first\n'), created: true });
    expect(modeOf(file)).toBe(0o600);
    const second = publishFileSync(file, Buffer.from('second\n'), { mode: 0o600 });
    expect(second).toEqual({ data: Buffer.from('first\n'), created: false });
    const third = await publishFile(file, 'third\n');
    expect(third).toEqual({ data: Buffer.from('first\n'), created: false });
    expect(readFileSync(file, 'utf8')).toBe('first\n');
    expect(readdirSync(dir)).toEqual(['state.key']);
  });

  it('many publishes at once in one process: exactly one creates, all see its content', async () => {
    const dir = freshDir();
    const file = path.join(dir, 'state.key');
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => publishFile(file, `content ${i}\n`, { mode: 0o600 })),
    );
    expect(results.filter((r) => r.created)).toHaveLength(1);
    const winner = results.find((r) => r.created)!.data;
    for (const r of results) expect(r.data.equals(winner)).toBe(true);
    expect(readFileSync(file).equals(winner)).toBe(true);
    expect(modeOf(file)).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['state.key']);
  });
});

interface RaceResult {
  kerberos: string;
  signing: string;
  pair: { cert: string; key: string; generated: boolean } | { error: string };
}

describe('processes started together on one empty data folder', () => {
  it('all end with the same Kerberos key, signing key and wss pair, the ones on disk', async () => {
    const dir = path.join(freshDir(), 'data');
    const script = path.join(ROOT, 'test', 'fixtures', 'publish-race.mjs');
    // Time for every child to load its modules before the common start.
    const startAt = Date.now() + 2500;
    // Every child is waited for, failed or not, so none still writes when the folder is removed.
    const runs = await Promise.allSettled(
      Array.from({ length: 6 }, () =>
        run(process.execPath, [script, dir, String(startAt)], { cwd: ROOT, timeout: 60_000 }),
      ),
    );
    const results = runs.map((r) => {
      if (r.status === 'rejected') throw r.reason;
      return JSON.parse(r.value.stdout) as RaceResult;
    });
    for (const r of results) expect(r.pair).not.toHaveProperty('error');
    const pairs = results.map((r) => r.pair as { cert: string; key: string; generated: boolean });

    const kerberos = readFileSync(path.join(dir, 'prudp-kerberos.key'), 'utf8').trim();
    expect(kerberos).toMatch(/^[0-9a-f]{64}$/);
    for (const r of results) expect(r.kerberos).toBe(kerberos);

    const signing = readFileSync(path.join(dir, 'prudp-signing-key.pem'), 'utf8');
    for (const r of results) expect(r.signing).toBe(signing);

    const cert = readFileSync(path.join(dir, 'unity-relay-wss-cert.pem'), 'utf8');
    const key = readFileSync(path.join(dir, 'unity-relay-wss-key.pem'), 'utf8');
    expect(new X509Certificate(cert).checkPrivateKey(createPrivateKey(key))).toBe(true);
    for (const p of pairs) expect([p.cert, p.key]).toEqual([cert, key]);
    expect(pairs.filter((p) => p.generated)).toHaveLength(1);

    // Nothing else was left behind (no temp file or folder), and every key is private.
    expect(readdirSync(dir).sort()).toEqual([
      'prudp-kerberos.key',
      'prudp-signing-key.pem',
      'unity-relay-wss-cert.pem',
      'unity-relay-wss-key.pem',
    ]);
    for (const f of ['prudp-kerberos.key', 'prudp-signing-key.pem', 'unity-relay-wss-key.pem'])
      expect(modeOf(path.join(dir, f))).toBe(0o600);
  }, 60_000);

  it('gamewire serve js5: each builds the demo cache, the first rename wins, all serve it', async () => {
    const dir = freshDir();
    // Two are enough: building the demo cache takes each about a second of CPU, so they overlap.
    const children = Array.from({ length: 2 }, () =>
      spawn(
        process.execPath,
        [BIN, 'serve', 'js5', '--port', '0', '--host', '127.0.0.1', '--no-admin', '--data-dir', dir],
        { cwd: ROOT, env: cliEnv(), stdio: ['ignore', 'ignore', 'pipe', 'ipc'] },
      ),
    );
    try {
      const ready = await Promise.all(
        children.map(
          (child) =>
            new Promise<string>((resolve) => {
              let err = '';
              child.stderr!.on('data', (d: Buffer) => {
                err += d.toString();
              });
              child.on('message', (m: { type?: string }) => {
                if (m.type === 'gamewire:ready') resolve('ready');
              });
              child.once('exit', (code) => resolve(`exited ${code}: ${err}`));
            }),
        ),
      );
      expect(ready).toEqual(['ready', 'ready']);
      expect(readdirSync(dir)).toEqual(['js5-demo-cache-530-v2']);
      expect(readdirSync(path.join(dir, 'js5-demo-cache-530-v2'))).toContain('main_file_cache.idx255');
    } finally {
      await Promise.all(
        children.map(async (child) => {
          if (child.exitCode !== null || child.signalCode !== null) return;
          const gone = new Promise((resolve) => child.once('exit', resolve));
          child.kill('SIGKILL');
          await gone;
        }),
      );
    }
  }, 60_000);
});

describe('ensureSelfSignedCert on a broken pair', () => {
  it('a key without its certificate (a crash between the two): a clear error once the wait is over', async () => {
    const good = freshDir();
    await ensureSelfSignedCert(good, '127.0.0.1');
    const dir = freshDir();
    copyFileSync(path.join(good, 'unity-relay-wss-key.pem'), path.join(dir, 'unity-relay-wss-key.pem'));
    const key = readFileSync(path.join(dir, 'unity-relay-wss-key.pem'));
    const t0 = Date.now();
    const err = await ensureSelfSignedCert(dir, '127.0.0.1', { waitMs: 300 }).catch((e: unknown) => e);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(err).toBeInstanceOf(Error);
    const message = (err as Error).message;
    expect(message).toContain(path.join(dir, 'unity-relay-wss-cert.pem'));
    expect(message).toContain(path.join(dir, 'unity-relay-wss-key.pem'));
    expect(message).toMatch(/delete/);
    // The key is left as it was, and nothing else was written.
    expect(readFileSync(path.join(dir, 'unity-relay-wss-key.pem')).equals(key)).toBe(true);
    expect(readdirSync(dir)).toEqual(['unity-relay-wss-key.pem']);
  });

  it('a key without its certificate written long ago: the error at once, with the default wait', async () => {
    const good = freshDir();
    await ensureSelfSignedCert(good, '127.0.0.1');
    const dir = freshDir();
    const keyPath = path.join(dir, 'unity-relay-wss-key.pem');
    copyFileSync(path.join(good, 'unity-relay-wss-key.pem'), keyPath);
    const hourAgo = new Date(Date.now() - 3_600_000);
    utimesSync(keyPath, hourAgo, hourAgo);
    const t0 = Date.now();
    const err = await ensureSelfSignedCert(dir, '127.0.0.1').catch((e: unknown) => e);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect((err as Error).message).toMatch(/has no certificate.*delete both/s);
  });

  it('a certificate and a key that do not match: the same error', async () => {
    const [a, b] = [freshDir(), freshDir()];
    await Promise.all([ensureSelfSignedCert(a, '127.0.0.1'), ensureSelfSignedCert(b, '127.0.0.1')]);
    copyFileSync(path.join(b, 'unity-relay-wss-key.pem'), path.join(a, 'unity-relay-wss-key.pem'));
    const err = await ensureSelfSignedCert(a, '127.0.0.1', { waitMs: 200 }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/do not match.*delete/s);
  });

  it('a missing certificate that appears while waiting (the first process finishing): no error', async () => {
    const good = freshDir();
    const made = await ensureSelfSignedCert(good, '127.0.0.1');
    expect(made.generated).toBe(true);
    const dir = freshDir();
    copyFileSync(path.join(good, 'unity-relay-wss-key.pem'), path.join(dir, 'unity-relay-wss-key.pem'));
    setTimeout(() => writeFileSync(path.join(dir, 'unity-relay-wss-cert.pem'), made.cert), 200);
    const pair = await ensureSelfSignedCert(dir, '127.0.0.1', { waitMs: 5000 });
    expect(pair.generated).toBe(false);
    expect(pair.cert.equals(made.cert)).toBe(true);
    expect(pair.key.equals(made.key)).toBe(true);
  });
});
