/**
 * The account file: an append-only log of JSON lines, so saving an account costs one small
 * append and an fdatasync, whatever the number of accounts, and the event loop never waits on
 * disk or on serialising the whole store.
 *
 * Format (one JSON object per line, UTF-8):
 *
 *     {"gamewire":"rmc-accounts","version":1}          header
 *     {"accountId":…,"pid":…,"name":…,"createdAt":…,"lastLoginAt":…}   one per change
 *
 * A later line for the same `accountId` replaces the earlier one. When more than half of the
 * lines are superseded, the log is compacted: the live accounts are written to `<file>.tmp` in
 * small slices (yielding between them), fsynced, renamed over the file, and the folder fsynced.
 *
 * Recovery: a last line without its newline (a write cut short by a crash) is ignored and cut
 * off; a line that does not parse is skipped and counted; a leftover `<file>.tmp` is an
 * unfinished compaction and is deleted (the file itself is complete). The JSON file written by
 * earlier versions (`{"accounts":[…]}`) is read and converted in place, atomically.
 */
import {
  closeSync,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import { type FileHandle, mkdir, open, rename } from 'node:fs/promises';
import path from 'node:path';
import { GamewireError } from '../../wire/errors.js';
import type { Account } from './store.js';

const HEADER = '{"gamewire":"rmc-accounts","version":1}\n';
/** Accounts serialised per slice while compacting, between yields to the event loop. */
const COMPACT_SLICE = 1000;

/** What loading found (for logs and tests). */
export interface AccountLogLoad {
  accounts: Map<string, Account>;
  /** Lines that could not be read and were skipped. */
  skippedLines: number;
  /** Bytes of a torn last line that were cut off. */
  tornBytes: number;
  /** A leftover temporary file from an interrupted compaction was removed. */
  removedTemp: boolean;
  /** The file was in the earlier whole-JSON format and was converted. */
  migrated: boolean;
}

function isAccount(a: unknown): a is Account {
  if (typeof a !== 'object' || a === null) return false;
  const r = a as Record<string, unknown>;
  return (
    typeof r.accountId === 'string' &&
    typeof r.pid === 'string' &&
    /^[0-9a-f]{32}$/.test(r.pid) &&
    typeof r.name === 'string' &&
    typeof r.createdAt === 'string' &&
    typeof r.lastLoginAt === 'string'
  );
}

function line(a: Account): string {
  return `${JSON.stringify({
    accountId: a.accountId,
    pid: a.pid,
    name: a.name,
    createdAt: a.createdAt,
    lastLoginAt: a.lastLoginAt,
  })}\n`;
}

/** Writes `text` to `file` atomically (temp file, fsync, rename, folder fsync). Startup only. */
function writeAtomicSync(file: string, text: string): void {
  const tmp = `${file}.tmp`;
  const fd = openSync(tmp, 'w');
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  syncDirSync(path.dirname(file));
}

function syncDirSync(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Some platforms cannot fsync a folder; the rename is still atomic.
  }
}

async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch {
    // As above.
  } finally {
    await fh?.close().catch(() => {});
  }
}

/**
 * Reads the account file at startup (synchronously: nothing is served yet), repairing what a
 * crash can leave behind. A missing file is an empty store.
 */
export function loadAccountLog(file: string): AccountLogLoad {
  const result: AccountLogLoad = {
    accounts: new Map(),
    skippedLines: 0,
    tornBytes: 0,
    removedTemp: false,
    migrated: false,
  };
  const tmp = `${file}.tmp`;
  try {
    statSync(tmp);
    rmSync(tmp, { force: true });
    result.removedTemp = true;
  } catch {
    // No leftover.
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return result;
  }
  if (text.length === 0) return result;
  if (!text.startsWith(HEADER)) {
    // The earlier format: one JSON document. Convert it once, atomically.
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const list = (parsed as { accounts?: unknown } | undefined)?.accounts;
    if (!Array.isArray(list)) {
      // Not ours, or a torn header: refuse to overwrite something we cannot read.
      throw new AccountFileError(`${file} is neither an rmc account log nor an rmc JSON account file`);
    }
    for (const a of list) {
      if (isAccount(a)) result.accounts.set(a.accountId, a);
      else result.skippedLines++;
    }
    writeAtomicSync(file, HEADER + [...result.accounts.values()].map(line).join(''));
    result.migrated = true;
    return result;
  }
  const end = text.lastIndexOf('\n') + 1;
  if (end < text.length) {
    result.tornBytes = Buffer.byteLength(text.slice(end));
    truncateSync(file, Buffer.byteLength(text.slice(0, end)));
  }
  let at = HEADER.length;
  while (at < end) {
    const nl = text.indexOf('\n', at);
    const l = text.slice(at, nl);
    at = nl + 1;
    if (l.length === 0) continue;
    try {
      const a = JSON.parse(l) as unknown;
      if (isAccount(a)) result.accounts.set(a.accountId, a);
      else result.skippedLines++;
    } catch {
      result.skippedLines++;
    }
  }
  return result;
}

/** The account file exists but is not one gamewire can read (it is left untouched). */
export class AccountFileError extends GamewireError {
  constructor(message: string) {
    super('ERR_RMC_ACCOUNT_FILE', message);
  }

  override get name(): string {
    return 'AccountFileError';
  }
}

/**
 * Appends account records to the log, one batch (one write, one fdatasync) at a time, and
 * compacts it in the background when it is mostly superseded lines.
 */
export class AccountLogWriter {
  private readonly file: string;
  private readonly accounts: ReadonlyMap<string, Account>;
  private fh: FileHandle | undefined = undefined;
  /** Accounts whose current state is not yet in the file. */
  private readonly pending = new Set<string>();
  /** Lines in the file (superseded ones included). */
  private lines: number;
  /** The write loop is running (set before it starts, cleared as it ends, both synchronously). */
  private active = false;
  private waiters: (() => void)[] = [];
  /** Lines written since the last write error (for the warning). */
  private failing = false;

  constructor(file: string, accounts: ReadonlyMap<string, Account>) {
    this.file = file;
    this.accounts = accounts;
    this.lines = accounts.size;
  }

  /** Queues `accountId`'s current state for the next batch. */
  mark(accountId: string): void {
    this.pending.add(accountId);
  }

  get hasPending(): boolean {
    return this.pending.size > 0;
  }

  /** Writes everything queued (in batches) and resolves once it is on disk. */
  save(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.waiters.push(resolve);
      if (!this.active) {
        this.active = true;
        void this.run();
      }
    });
  }

  async close(): Promise<void> {
    await this.save();
    await this.fh?.close().catch(() => {});
    this.fh = undefined;
  }

  private async run(): Promise<void> {
    try {
      while (this.pending.size > 0 || this.waiters.length > 0) {
        const waiters = this.waiters;
        this.waiters = [];
        if (this.pending.size > 0) await this.writeBatch();
        if (this.lines > 2 * this.accounts.size + 1000) await this.compact();
        for (const w of waiters) w();
      }
    } finally {
      this.active = false;
    }
  }

  private async handle(): Promise<FileHandle> {
    if (this.fh === undefined) {
      await mkdir(path.dirname(this.file), { recursive: true });
      const fh = await open(this.file, 'a');
      if ((await fh.stat()).size === 0) await fh.write(HEADER);
      this.fh = fh;
    }
    return this.fh;
  }

  private async writeBatch(): Promise<void> {
    const ids = [...this.pending];
    this.pending.clear();
    let text = '';
    let n = 0;
    for (const id of ids) {
      const a = this.accounts.get(id);
      if (a === undefined) continue;
      text += line(a);
      n++;
    }
    if (n === 0) return;
    try {
      const fh = await this.handle();
      await fh.write(text);
      await fh.datasync();
      this.lines += n;
      this.failing = false;
    } catch (err) {
      // Keep the records for the next attempt; say so once per failing streak.
      for (const id of ids) this.pending.add(id);
      if (!this.failing) {
        this.failing = true;
        process.emitWarning(
          `gamewire rmc: could not save accounts to ${this.file}: ${(err as Error).message}`,
        );
      }
      await new Promise((r) => setTimeout(r, 1000).unref());
    }
  }

  /** Rewrites the live accounts into a fresh log, a slice at a time, then swaps it in. */
  private async compact(): Promise<void> {
    const tmp = `${this.file}.tmp`;
    let out: FileHandle | undefined;
    try {
      out = await open(tmp, 'w');
      await out.write(HEADER);
      let slice = '';
      let n = 0;
      let count = 0;
      // The accounts map may change while we yield; accounts changed meanwhile are also
      // pending, so they reach the new file through the next batch.
      for (const a of [...this.accounts.values()]) {
        slice += line(a);
        count++;
        if (++n === COMPACT_SLICE) {
          await out.write(slice);
          slice = '';
          n = 0;
        }
      }
      if (slice.length > 0) await out.write(slice);
      await out.sync();
      await out.close();
      out = undefined;
      await this.fh?.close();
      this.fh = undefined;
      await rename(tmp, this.file);
      await syncDir(path.dirname(this.file));
      this.lines = count;
    } catch (err) {
      await out?.close().catch(() => {});
      process.emitWarning(`gamewire rmc: could not compact ${this.file}: ${(err as Error).message}`);
      // Never retry in a loop: pretend the log is compact until it doubles again.
      this.lines = this.accounts.size;
    }
  }
}
