/**
 * The account store's file: an append-only log that survives kill -9, ignores torn tails and
 * leftover temp files, converts the earlier JSON file, and never rewrites everything per login.
 */
import { spawn } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { AccountFileError, loadAccountLog } from '../../../src/protocols/rmc/account-log.js';
import { MemoryStore } from '../../../src/protocols/rmc/index.js';
import { elapse } from '../../helpers/wait.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

let dirs: string[] = [];
afterEach(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});

function tempFile(name = 'accounts.log'): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-rmc-store-'));
  dirs.push(dir);
  return path.join(dir, name);
}

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '');

describe('rmc account log', () => {
  it('a new account is one appended line, on disk when whenSaved resolves; restarts keep PIDs', async () => {
    const file = tempFile();
    const a = new MemoryStore(file);
    for (let i = 0; i < 500; i++) a.login(`user-${i}`, `U${i}`);
    await a.whenSaved();
    const size = statSync(file).size;
    const acc = a.login('one-more', 'More');
    await a.whenSaved();
    // One short line, not a rewrite of 500 accounts.
    const grew = statSync(file).size - size;
    expect(grew).toBeGreaterThan(50);
    expect(grew).toBeLessThan(300);
    expect(lines(file)).toHaveLength(502); // header + 501
    await a.close();
    const b = new MemoryStore(file);
    expect(b.accountCount()).toBe(501);
    expect(b.account('one-more')?.pid).toBe(acc.pid);
    expect(b.login('one-more', 'Renamed').pid).toBe(acc.pid);
    await b.close();
    expect(new MemoryStore(file).account('one-more')?.name).toBe('Renamed');
  });

  it('changes to existing accounts are batched (saveDelayMs) and flushed on flush()', async () => {
    const file = tempFile();
    const store = new MemoryStore(file, { saveDelayMs: 60_000 });
    store.login('ann', 'Ann');
    await store.whenSaved();
    const before = lines(file).length;
    for (let i = 0; i < 50; i++) store.login('ann', `Ann ${i}`);
    await elapse(50, 'nothing may be written before the save delay');
    expect(lines(file)).toHaveLength(before);
    await store.flush();
    expect(lines(file)).toHaveLength(before + 1);
    expect(new MemoryStore(file).account('ann')?.name).toBe('Ann 49');
    await store.close();
  });

  it('ignores and cuts off a torn last line, then appends after it', async () => {
    const file = tempFile();
    const a = new MemoryStore(file);
    a.login('kept', 'Kept');
    await a.close();
    appendFileSync(file, '{"accountId":"torn","pid":"0011');
    const loaded = loadAccountLog(file);
    expect([...loaded.accounts.keys()]).toEqual(['kept']);
    expect(loaded.tornBytes).toBeGreaterThan(0);
    const b = new MemoryStore(file);
    b.login('after', 'After');
    await b.close();
    const c = new MemoryStore(file);
    expect(c.accountCount()).toBe(2);
    expect(c.account('after')).toBeDefined();
  });

  it('skips a corrupt line in the middle and removes a leftover temp file', async () => {
    const file = tempFile();
    const a = new MemoryStore(file);
    a.login('one', 'One');
    await a.whenSaved();
    appendFileSync(file, 'not json at all\n');
    a.login('two', 'Two');
    await a.close();
    writeFileSync(`${file}.tmp`, '{"gamewire":"rmc-accounts","version":1}\n{"accountId":"half');
    const loaded = loadAccountLog(file);
    expect(loaded.removedTemp).toBe(true);
    expect(loaded.skippedLines).toBe(1);
    expect([...loaded.accounts.keys()].sort()).toEqual(['one', 'two']);
    expect(existsSync(`${file}.tmp`)).toBe(false);
  });

  it('converts the JSON file of earlier versions in place', async () => {
    const file = tempFile('accounts.json');
    const old = {
      accounts: [
        {
          accountId: 'legacy',
          pid: '00112233445566778899aabbccddeeff',
          name: 'Legacy',
          createdAt: '2025-01-01T00:00:00.000Z',
          lastLoginAt: '2025-01-02T00:00:00.000Z',
        },
        { accountId: 'broken', pid: 'nope' },
      ],
    };
    writeFileSync(file, JSON.stringify(old, null, 2));
    const s = new MemoryStore(file);
    expect(s.account('legacy')?.pid).toBe('00112233445566778899aabbccddeeff');
    expect(s.accountCount()).toBe(1);
    expect(readFileSync(file, 'utf8').startsWith('{"gamewire":"rmc-accounts"')).toBe(true);
    s.login('new', 'New');
    await s.close();
    expect(new MemoryStore(file).accountCount()).toBe(2);
  });

  it('refuses a file it cannot read, and leaves it untouched', () => {
    const file = tempFile();
    writeFileSync(file, 'hello, I am not an account file');
    expect(() => new MemoryStore(file)).toThrow(AccountFileError);
    expect(readFileSync(file, 'utf8')).toBe('hello, I am not an account file');
  });

  it('compacts a log that is mostly superseded lines', async () => {
    const file = tempFile();
    const s = new MemoryStore(file, { saveDelayMs: 0 });
    s.login('a', 'A');
    s.login('b', 'B');
    for (let i = 0; i < 1200; i++) {
      s.login('a', `A${i}`);
      await s.flush();
    }
    await s.close();
    // Header + at most the two live accounts plus the lines since the last compaction.
    expect(lines(file).length).toBeLessThan(1100);
    const again = new MemoryStore(file);
    expect(again.accountCount()).toBe(2);
    expect(again.account('a')?.name).toBe('A1199');
  });

  it('keeps every acknowledged account across kill -9 in the middle of writes', async () => {
    const file = tempFile();
    const store = path.join(ROOT, 'dist', 'src', 'protocols', 'rmc', 'store.js');
    expect(existsSync(store)).toBe(true);
    // A child process creates accounts as fast as it can and prints each one once durable.
    const script = `
      const { MemoryStore } = await import(${JSON.stringify(store)});
      const s = new MemoryStore(${JSON.stringify(file)}, { saveDelayMs: 5 });
      for (let i = 0; ; i++) {
        s.login('acct-' + i, 'N' + i);
        if (i % 7 === 0) s.login('acct-0', 'renamed-' + i);
        await s.whenSaved();
        process.stdout.write('acct-' + i + '\\n');
      }`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const acked: string[] = [];
    let buf = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`only ${acked.length} acknowledged`)), 30_000);
      child.stdout.on('data', (d: Buffer) => {
        buf += d.toString();
        const parts = buf.split('\n');
        buf = parts.pop()!;
        acked.push(...parts);
        if (acked.length >= 400) {
          clearTimeout(timer);
          child.kill('SIGKILL');
          resolve();
        }
      });
      child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    await new Promise((r) => child.once('close', r));
    const reloaded = new MemoryStore(file);
    for (const id of acked) expect(reloaded.account(id), id).toBeDefined();
    expect(existsSync(`${file}.tmp`)).toBe(false);
  }, 60_000);
});

describe('rmc account log: arbitrary file contents', () => {
  it('loads or refuses with AccountFileError, never anything else', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b).toString('latin1')),
          fc
            .array(fc.string(), { maxLength: 5 })
            .map((ls) => `{"gamewire":"rmc-accounts","version":1}\n${ls.join('\n')}`),
        ),
        (text) => {
          const file = tempFile();
          writeFileSync(file, text, 'latin1');
          try {
            const loaded = loadAccountLog(file);
            for (const a of loaded.accounts.values()) expect(a.pid).toMatch(/^[0-9a-f]{32}$/);
          } catch (e) {
            expect(e).toBeInstanceOf(AccountFileError);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
