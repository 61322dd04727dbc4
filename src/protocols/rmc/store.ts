/**
 * The embedded account and session store: in memory, optionally persisted to an append-only
 * account log (`account-log.ts`): a new account is on disk (fdatasync) before its first login
 * is answered; changes to existing accounts (name, last login) are batched. Enough for a
 * revival server; a larger deployment replaces it behind the same interface.
 */
import { randomBytes } from 'node:crypto';
import { AccountLogWriter, loadAccountLog } from './account-log.js';
import { RmcError } from './errors.js';
import { DEFAULT_MAX_ACCOUNTS, DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT } from './options.js';

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
  /** With a file: changes to existing accounts are written at most this often, in ms (default 1000). */
  saveDelayMs?: number;
  /**
   * Most login sessions one account may hold at once (default 8); more get ConcurrentLoginDenied.
   * 0 = no limit. The same name as `rmc.maxLoginsPerAccount` (`--rmc-max-logins-per-account`).
   */
  maxLoginsPerAccount?: number;
  /** Former name of `maxLoginsPerAccount`, still accepted. */
  maxSessionsPerAccount?: number;
}

// Option defaults (`rmc.maxAccounts`, `rmc.maxLoginsPerAccount`): the declaration's (options.ts).
export { DEFAULT_MAX_ACCOUNTS, DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT };

/** One login session's record (`sessions()`): where it is connected, in a fleet. */
export interface LoginSessionRecord extends LoginSession {
  /** The node that holds the connection (`rmc-secure:<id>`, `rmc-auth:<id>`); absent in one process. */
  node?: string;
}

/**
 * The account store as handlers use it: the embedded `MemoryStore` answers synchronously, a
 * fleet's `RedisAccountStore` (fleet/redis-store.ts) with promises. Every method may throw (or
 * reject with) an `RmcError`: a limit, or the store being unavailable right now.
 */
export interface AccountStore {
  /**
   * Finds the account or creates it; updates name and last login. `origin` is the address a new
   * account comes from, for stores that enforce registration rate limits themselves
   * (`enforcesRegistrationLimits`).
   */
  login(accountId: string, name: string, origin?: { address: string }): Account | Promise<Account>;
  account(accountId: string): Account | undefined | Promise<Account | undefined>;
  accountCount(): number | Promise<number>;
  startSession(session: LoginSession): void | Promise<void>;
  endSession(connectionId: number): void | Promise<void>;
  sessions(): LoginSessionRecord[] | Promise<LoginSessionRecord[]>;
  /** True when `login` applies the registration rate limits (fleet-wide); the handler then does not. */
  readonly enforcesRegistrationLimits?: boolean;
  whenSaved?(): Promise<void>;
  close?(): Promise<void>;
}

/** The synchronous store (the embedded one); also an `AccountStore`. */
export interface RmcStore {
  /**
   * Finds the account or creates it with a fresh random PID; updates name and last login.
   * May throw an RmcError (e.g. the account limit is reached).
   */
  login(accountId: string, name: string): Account;
  account(accountId: string): Account | undefined;
  accountCount(): number;
  /** May throw an RmcError (e.g. the account holds its most login sessions). */
  startSession(session: LoginSession): void;
  endSession(connectionId: number): void;
  sessions(): LoginSession[];
  /** Resolves once every change so far is durable (absent: nothing to wait for). */
  whenSaved?(): Promise<void>;
}

export class MemoryStore implements RmcStore {
  private readonly accounts = new Map<string, Account>();
  private readonly live = new Map<number, LoginSession>();
  private readonly perAccount = new Map<string, number>();
  private readonly log: AccountLogWriter | undefined;
  readonly maxAccounts: number;
  readonly maxLoginsPerAccount: number;
  private readonly saveDelayMs: number;
  private timer: NodeJS.Timeout | undefined = undefined;

  /**
   * With `file`, accounts are loaded from and saved to that account log (a JSON file from an
   * earlier version is converted). Throws AccountFileError when the file is not one we can read.
   */
  constructor(file?: string, options: MemoryStoreOptions = {}) {
    this.maxAccounts = options.maxAccounts ?? DEFAULT_MAX_ACCOUNTS;
    this.saveDelayMs = options.saveDelayMs ?? 1000;
    this.maxLoginsPerAccount =
      options.maxLoginsPerAccount ?? options.maxSessionsPerAccount ?? DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT;
    if (file !== undefined) {
      const loaded = loadAccountLog(file);
      for (const [k, v] of loaded.accounts) this.accounts.set(k, v);
      this.log = new AccountLogWriter(file, this.accounts);
    }
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
      if (this.log !== undefined) {
        // A new account is written at once (the caller can wait with whenSaved).
        this.log.mark(accountId);
        void this.log.save();
      }
    } else {
      a.name = name;
      a.lastLoginAt = now;
      if (this.log !== undefined) {
        this.log.mark(accountId);
        this.scheduleSave();
      }
    }
    return a;
  }

  account(accountId: string): Account | undefined {
    return this.accounts.get(accountId);
  }

  accountCount(): number {
    return this.accounts.size;
  }

  startSession(session: LoginSession): void {
    // A second login on the same connection replaces its first session.
    this.endSession(session.connectionId);
    const held = this.perAccount.get(session.accountId) ?? 0;
    if (this.maxLoginsPerAccount > 0 && held >= this.maxLoginsPerAccount)
      throw RmcError.of(
        'RendezVous::ConcurrentLoginDenied',
        `an account may hold at most ${this.maxLoginsPerAccount} login sessions`,
      );
    this.live.set(session.connectionId, session);
    this.perAccount.set(session.accountId, (this.perAccount.get(session.accountId) ?? 0) + 1);
  }

  endSession(connectionId: number): void {
    const s = this.live.get(connectionId);
    if (s === undefined) return;
    this.live.delete(connectionId);
    const left = (this.perAccount.get(s.accountId) ?? 1) - 1;
    if (left <= 0) this.perAccount.delete(s.accountId);
    else this.perAccount.set(s.accountId, left);
  }

  sessions(): LoginSession[] {
    return [...this.live.values()];
  }

  /** Login sessions `accountId` holds now. */
  sessionCount(accountId: string): number {
    return this.perAccount.get(accountId) ?? 0;
  }

  whenSaved(): Promise<void> {
    return this.log === undefined ? Promise.resolve() : this.log.save();
  }

  /** Writes pending changes to the file now, and waits until they are on disk. */
  async flush(): Promise<void> {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    await this.log?.save();
  }

  /** Flushes, then closes the file. */
  async close(): Promise<void> {
    await this.flush();
    await this.log?.close();
  }

  private scheduleSave(): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.log?.save();
    }, this.saveDelayMs);
    this.timer.unref();
  }
}
