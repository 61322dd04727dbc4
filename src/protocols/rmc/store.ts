/**
 * The embedded account and session store: in memory, optionally persisted to one JSON file
 * (written atomically and asynchronously, at most once per `saveDelayMs`, after changes; `flush()`
 * writes at once). Enough for a revival server with a handful of users; a larger deployment
 * replaces it behind the same interface.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { RmcError } from './errors.js';

export interface Account {
  /** Stable id from the token validator (e.g. the Ubisoft profile id). */
  accountId: string;
  /** 16-byte PID, lowercase hex (HyperScape's "User PID: UUID"). */
  pid: string;
  name: string;
  createdAt: string;
  lastLoginAt: string;
}

export interface LoginSession {
  connectionId: number;
  pid: string;
  accountId: string;
  since: string;
}

export interface MemoryStoreOptions {
  /**
   * Most accounts (default 100 000). A login that would create one more throws
   * `RendezVous::LimitExceeded`; existing accounts keep logging in.
   */
  maxAccounts?: number;
  /** With a file: changes are written at most this often, in milliseconds (default 1000). */
  saveDelayMs?: number;
}

export const DEFAULT_MAX_ACCOUNTS = 100_000;

export interface RmcStore {
  /**
   * Finds the account or creates it with a fresh random PID; updates name and last login.
   * May throw an RmcError (e.g. the account limit is reached).
   */
  login(accountId: string, name: string): Account;
  account(accountId: string): Account | undefined;
  accountCount(): number;
  startSession(session: LoginSession): void;
  endSession(connectionId: number): void;
  sessions(): LoginSession[];
}

export class MemoryStore implements RmcStore {
  private readonly accounts = new Map<string, Account>();
  private readonly live = new Map<number, LoginSession>();
  private readonly file: string | undefined;
  readonly maxAccounts: number;
  private readonly saveDelayMs: number;
  private dirty = false;
  private timer: NodeJS.Timeout | undefined = undefined;
  private writing: Promise<void> | undefined = undefined;

  /** With `file`, accounts are loaded from and saved to that JSON file. */
  constructor(file?: string, options: MemoryStoreOptions = {}) {
    this.file = file;
    this.maxAccounts = options.maxAccounts ?? DEFAULT_MAX_ACCOUNTS;
    this.saveDelayMs = options.saveDelayMs ?? 1000;
    if (file !== undefined) this.load(file);
  }

  login(accountId: string, name: string): Account {
    const now = new Date().toISOString();
    let a = this.accounts.get(accountId);
    if (a === undefined) {
      if (this.accounts.size >= this.maxAccounts)
        throw RmcError.of(
          'RendezVous::LimitExceeded',
          `the store holds its maximum of ${this.maxAccounts} accounts`,
        );
      a = { accountId, pid: randomBytes(16).toString('hex'), name, createdAt: now, lastLoginAt: now };
      this.accounts.set(accountId, a);
    } else {
      a.name = name;
      a.lastLoginAt = now;
    }
    this.scheduleSave();
    return a;
  }

  account(accountId: string): Account | undefined {
    return this.accounts.get(accountId);
  }

  accountCount(): number {
    return this.accounts.size;
  }

  startSession(session: LoginSession): void {
    this.live.set(session.connectionId, session);
  }

  endSession(connectionId: number): void {
    this.live.delete(connectionId);
  }

  sessions(): LoginSession[] {
    return [...this.live.values()];
  }

  /** Writes pending changes to the file now (and waits for a write already under way). */
  async flush(): Promise<void> {
    while (this.writing !== undefined) await this.writing;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.dirty) await this.write();
  }

  private load(file: string): void {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      return; // no file yet
    }
    const parsed = JSON.parse(text) as { accounts?: Account[] };
    for (const a of parsed.accounts ?? []) {
      if (typeof a.accountId === 'string' && /^[0-9a-f]{32}$/.test(a.pid)) this.accounts.set(a.accountId, a);
    }
  }

  private scheduleSave(): void {
    if (this.file === undefined) return;
    this.dirty = true;
    if (this.timer !== undefined || this.writing !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.dirty) void this.write();
    }, this.saveDelayMs);
    this.timer.unref();
  }

  private write(): Promise<void> {
    const file = this.file!;
    this.dirty = false;
    const text = `${JSON.stringify({ accounts: [...this.accounts.values()] }, null, 2)}\n`;
    const tmp = `${file}.tmp`;
    const p = (async () => {
      try {
        await mkdir(path.dirname(file), { recursive: true });
        await writeFile(tmp, text);
        await rename(tmp, file);
      } catch (err) {
        this.dirty = true;
        process.emitWarning(`gamewire rmc: could not save accounts to ${file}: ${(err as Error).message}`);
      } finally {
        this.writing = undefined;
        // Changes made while writing go out after another delay.
        if (this.dirty && this.timer === undefined) this.scheduleSave();
      }
    })();
    this.writing = p;
    return p;
  }
}
