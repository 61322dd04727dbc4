/**
 * The embedded account and session store: in memory, optionally persisted to one JSON file
 * (written atomically after each change). Enough for a revival server with a handful of users;
 * a larger deployment replaces it behind the same interface.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';

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

export interface RmcStore {
  /** Finds the account or creates it with a fresh random PID; updates name and last login. */
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

  /** With `file`, accounts are loaded from and saved to that JSON file. */
  constructor(file?: string) {
    this.file = file;
    if (file !== undefined) this.load(file);
  }

  login(accountId: string, name: string): Account {
    const now = new Date().toISOString();
    let a = this.accounts.get(accountId);
    if (a === undefined) {
      a = { accountId, pid: randomBytes(16).toString('hex'), name, createdAt: now, lastLoginAt: now };
      this.accounts.set(accountId, a);
    } else {
      a.name = name;
      a.lastLoginAt = now;
    }
    this.save();
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

  private save(): void {
    if (this.file === undefined) return;
    mkdirSync(path.dirname(this.file), { recursive: true });
    const tmp = `${this.file}.tmp`;
    writeFileSync(tmp, `${JSON.stringify({ accounts: [...this.accounts.values()] }, null, 2)}\n`);
    renameSync(tmp, this.file);
  }
}
