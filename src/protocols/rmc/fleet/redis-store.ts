/**
 * The account store of an RMC fleet, in Redis: every auth and secure server of the fleet sees the
 * same accounts and login sessions, with the embedded store's limits enforced atomically (each
 * check-and-write is one Lua script, so two processes racing for the last account slot, or
 * creating the same account, cannot both win).
 *
 * Keys (under `<prefix>rmc:`):
 * - `accounts`: hash, account id -> the account's JSON (`Account`); its length is the count;
 * - `pid:seq`: the counter new PIDs are made from (INCR: unique over the fleet);
 * - `reg:ip:<address key>`, `reg:all`: registration token buckets (hash `tokens`, `at`), refilled
 *   by Redis's clock; the per-address ones expire after an idle hour;
 * - `logins`: hash, `<node>#<connection>` -> login session JSON;
 * - `logins:acct:<account id>`: set of that account's `<node>#<connection>`;
 * - `connid:seq`: the counter fleet-unique connection ids are reserved from, in blocks.
 *
 * A login session belongs to the node (`<kind>:<id>`) that holds its connection. When that
 * node's record (node-registry.ts) has expired, the node is dead, and its sessions are dropped
 * the next time a script looks at them: a crashed server never keeps an account at its cap.
 * Not while the fleet recovers from a Redis outage longer than the TTL, though (every record
 * lapsed, the nodes alive): see `LUA_ALIVE` in control-plane.ts.
 */
import { randomBytes } from 'node:crypto';
import { RmcError } from '../errors.js';
import { REGISTRATION_REFUSED } from '../protocols/login.js';
import {
  DEFAULT_REGISTRATIONS_PER_HOUR,
  DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR,
} from '../protocols/rate-limit.js';
import {
  type Account,
  type AccountStore,
  DEFAULT_MAX_ACCOUNTS,
  DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT,
  type LoginSession,
  type LoginSessionRecord,
} from '../store.js';
import {
  CleanupQueue,
  controlPlane,
  durablePlane,
  type FleetStoreContext,
  keysOf,
  LUA_ALIVE,
  memberRef,
} from './control-plane.js';
import type { SweepStep } from './sweep.js';

export interface RedisAccountStoreOptions {
  /** Most accounts in the fleet (default 100 000). */
  maxAccounts?: number;
  /** Most login sessions one account may hold at once, over the fleet (default 8; 0 = no limit). */
  maxLoginsPerAccount?: number;
  /** Former name of `maxLoginsPerAccount`, still accepted. */
  maxSessionsPerAccount?: number;
  /** New accounts one address may create per hour, over the fleet (default 20; 0 = no limit). */
  registrationsPerIpPerHour?: number;
  /** New accounts the fleet creates per hour (default 10 000; 0 = no limit). */
  registrationsPerHour?: number;
}

// ARGV: rmc prefix, account id, name, now (ISO), max accounts, 8 random bytes (hex), address
// key, per-address per hour, per hour. Returns {'ok', json, created} or {'limit'|'address'|'server'}.
const LOGIN_SCRIPT = `
local P = ARGV[1]
local raw = redis.call('HGET', P .. 'accounts', ARGV[2])
if raw then
  local a = cjson.decode(raw)
  a.name = ARGV[3]
  a.lastLoginAt = ARGV[4]
  local out = cjson.encode(a)
  redis.call('HSET', P .. 'accounts', ARGV[2], out)
  return { 'ok', out, 0 }
end
if redis.call('HLEN', P .. 'accounts') >= tonumber(ARGV[5]) then return { 'limit' } end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local HOUR = 3600000
local function bucket(key, cap)
  local s = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(s[1]) or cap
  local at = tonumber(s[2]) or now
  if now > at then
    tokens = math.min(cap, tokens + (now - at) * cap / HOUR)
    at = now
  end
  return tokens, at
end
local perIp = tonumber(ARGV[8])
local perHour = tonumber(ARGV[9])
local ipKey = P .. 'reg:ip:' .. ARGV[7]
local allKey = P .. 'reg:all'
local ipTokens, ipAt, allTokens, allAt
if perIp > 0 then
  ipTokens, ipAt = bucket(ipKey, perIp)
  if ipTokens < 1 then return { 'address' } end
end
if perHour > 0 then
  allTokens, allAt = bucket(allKey, perHour)
  if allTokens < 1 then return { 'server' } end
  redis.call('HSET', allKey, 'tokens', string.format('%.17g', allTokens - 1), 'at', string.format('%d', allAt))
end
if perIp > 0 then
  redis.call('HSET', ipKey, 'tokens', string.format('%.17g', ipTokens - 1), 'at', string.format('%d', ipAt))
  redis.call('PEXPIRE', ipKey, HOUR)
end
local n = redis.call('INCR', P .. 'pid:seq') + 4095
local hex = ''
for i = 1, 8 do
  hex = hex .. string.format('%02x', n % 256)
  n = math.floor(n / 256)
end
local a = { accountId = ARGV[2], pid = hex .. ARGV[6], name = ARGV[3], createdAt = ARGV[4], lastLoginAt = ARGV[4] }
local out = cjson.encode(a)
redis.call('HSET', P .. 'accounts', ARGV[2], out)
return { 'ok', out, 1 }`;

// ARGV: rmc prefix, fleet prefix, ref, account id, session JSON, max per account.
// Returns 1 (started) or 0 (the account holds its most sessions).
const START_SESSION_SCRIPT = `${LUA_ALIVE}
local P, F, ref, acct = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local old = redis.call('HGET', P .. 'logins', ref)
if old then
  local o = cjson.decode(old)
  redis.call('SREM', P .. 'logins:acct:' .. o.accountId, ref)
  redis.call('HDEL', P .. 'logins', ref)
end
local set = P .. 'logins:acct:' .. acct
for _, r in ipairs(redis.call('SMEMBERS', set)) do
  if not alive(F, r) or redis.call('HEXISTS', P .. 'logins', r) == 0 then
    redis.call('SREM', set, r)
    redis.call('HDEL', P .. 'logins', r)
  end
end
local max = tonumber(ARGV[6])
if max > 0 and redis.call('SCARD', set) >= max then return 0 end
redis.call('SADD', set, ref)
redis.call('HSET', P .. 'logins', ref, ARGV[5])
return 1`;

// ARGV: rmc prefix, ref.
const END_SESSION_SCRIPT = `
local P, ref = ARGV[1], ARGV[2]
local old = redis.call('HGET', P .. 'logins', ref)
if not old then return 0 end
local o = cjson.decode(old)
redis.call('SREM', P .. 'logins:acct:' .. o.accountId, ref)
redis.call('HDEL', P .. 'logins', ref)
return 1`;

// ARGV: rmc prefix, fleet prefix. Drops the sessions of dead nodes; returns {ref, json, …}.
const LIST_SESSIONS_SCRIPT = `${LUA_ALIVE}
local P, F = ARGV[1], ARGV[2]
local all = redis.call('HGETALL', P .. 'logins')
local out = {}
for i = 1, #all, 2 do
  local ref, raw = all[i], all[i + 1]
  if alive(F, ref) then
    out[#out + 1] = ref
    out[#out + 1] = raw
  else
    local o = cjson.decode(raw)
    redis.call('SREM', P .. 'logins:acct:' .. o.accountId, ref)
    redis.call('HDEL', P .. 'logins', ref)
  end
end
return out`;

// ARGV: rmc prefix, fleet prefix, cursor, count. One bounded step of the sweep: looks at about
// count login sessions from the cursor and drops those of dead nodes. Returns {next cursor,
// looked at, dropped}: nothing large.
const SWEEP_SESSIONS_SCRIPT = `${LUA_ALIVE}
local P, F = ARGV[1], ARGV[2]
local r = redis.call('HSCAN', P .. 'logins', ARGV[3], 'COUNT', tonumber(ARGV[4]))
local items = r[2]
local dropped = 0
for i = 1, #items, 2 do
  local ref = items[i]
  if not alive(F, ref) then
    local ok, o = pcall(cjson.decode, items[i + 1])
    if ok and type(o) == 'table' and o.accountId ~= nil then
      redis.call('SREM', P .. 'logins:acct:' .. o.accountId, ref)
    end
    redis.call('HDEL', P .. 'logins', ref)
    dropped = dropped + 1
  end
end
return { r[1], math.floor(#items / 2), dropped }`;

// ARGV: key, block size, the highest id this process has seen. The counter never goes back
// below what a live node remembers (a Redis that lost its data restarts it at 0).
const RESERVE_IDS_SCRIPT = `
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
local floor = tonumber(ARGV[2]) + tonumber(ARGV[1])
if v < floor then
  redis.call('SET', KEYS[1], floor)
  v = floor
end
return v`;

export class RedisAccountStore implements AccountStore {
  readonly enforcesRegistrationLimits = true;
  readonly maxAccounts: number;
  readonly maxLoginsPerAccount: number;
  readonly registrationsPerIpPerHour: number;
  readonly registrationsPerHour: number;
  private readonly ctx: FleetStoreContext;
  private readonly keys: ReturnType<typeof keysOf>;

  constructor(ctx: FleetStoreContext, options: RedisAccountStoreOptions = {}) {
    this.ctx = ctx;
    this.keys = keysOf(ctx);
    this.cleanup = new CleanupQueue(ctx);
    this.maxAccounts = options.maxAccounts ?? DEFAULT_MAX_ACCOUNTS;
    this.maxLoginsPerAccount =
      options.maxLoginsPerAccount ?? options.maxSessionsPerAccount ?? DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT;
    this.registrationsPerIpPerHour =
      options.registrationsPerIpPerHour ?? DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR;
    this.registrationsPerHour = options.registrationsPerHour ?? DEFAULT_REGISTRATIONS_PER_HOUR;
  }

  private get client() {
    return this.ctx.redis.client;
  }

  private ref(connectionId: number): string {
    return memberRef(this.ctx, connectionId);
  }

  async login(accountId: string, name: string, origin?: { address: string }): Promise<Account> {
    const reply = (await durablePlane(this.ctx, 'login', () =>
      this.client.eval(
        LOGIN_SCRIPT,
        0,
        this.keys.rmc,
        accountId,
        name,
        new Date().toISOString(),
        String(this.maxAccounts),
        randomBytes(8).toString('hex'),
        origin?.address ?? 'unknown',
        String(this.registrationsPerIpPerHour),
        String(this.registrationsPerHour),
      ),
    )) as [string, string?, number?];
    switch (reply[0]) {
      case 'ok':
        return JSON.parse(reply[1]!) as Account;
      case 'limit':
        throw RmcError.of(
          'RendezVous::LimitExceeded',
          `the store holds its maximum of ${this.maxAccounts} accounts`,
        );
      case 'address':
        throw RmcError.of(
          'RendezVous::LimitExceeded',
          `${REGISTRATION_REFUSED} from this address; try again later`,
        );
      default:
        throw RmcError.of(
          'RendezVous::LimitExceeded',
          `${REGISTRATION_REFUSED} on this server; try again later`,
        );
    }
  }

  async account(accountId: string): Promise<Account | undefined> {
    const raw = await controlPlane(this.ctx, 'account', () =>
      this.client.hget(`${this.keys.rmc}accounts`, accountId),
    );
    return raw === null ? undefined : (JSON.parse(raw) as Account);
  }

  accountCount(): Promise<number> {
    return controlPlane(this.ctx, 'account count', () => this.client.hlen(`${this.keys.rmc}accounts`));
  }

  async startSession(session: LoginSession): Promise<void> {
    const ok = await durablePlane(this.ctx, 'login session', () =>
      this.client.eval(
        START_SESSION_SCRIPT,
        0,
        this.keys.rmc,
        this.keys.fleet,
        this.ref(session.connectionId),
        session.accountId,
        JSON.stringify({ ...session, node: this.ctx.nodeRef }),
        String(this.maxLoginsPerAccount),
      ),
    );
    if (ok !== 1)
      throw RmcError.of(
        'RendezVous::ConcurrentLoginDenied',
        `an account may hold at most ${this.maxLoginsPerAccount} login sessions`,
      );
  }

  /** Logouts waiting for Redis to come back. */
  readonly cleanup: CleanupQueue;

  async endSession(connectionId: number): Promise<void> {
    await this.cleanup.run('logout', () =>
      this.client.eval(END_SESSION_SCRIPT, 0, this.keys.rmc, this.ref(connectionId)),
    );
  }

  /**
   * One bounded step of the background sweep (sweep.ts): about `count` login sessions from
   * `cursor`, those of dead nodes dropped.
   */
  async sweepStep(cursor: string, count: number): Promise<SweepStep> {
    const [next, scanned, dropped] = (await controlPlane(this.ctx, 'login session sweep', () =>
      this.client.eval(SWEEP_SESSIONS_SCRIPT, 0, this.keys.rmc, this.keys.fleet, cursor, String(count)),
    )) as [string, number, number];
    return { cursor: String(next), scanned: Number(scanned), dropped: Number(dropped) };
  }

  /** Every login session of the fleet (one script over all of them: for listings, not sweeps). */
  async sessions(): Promise<LoginSessionRecord[]> {
    const reply = (await controlPlane(this.ctx, 'login sessions', () =>
      this.client.eval(LIST_SESSIONS_SCRIPT, 0, this.keys.rmc, this.keys.fleet),
    )) as string[];
    const out: LoginSessionRecord[] = [];
    for (let i = 0; i < reply.length; i += 2) out.push(JSON.parse(reply[i + 1]!) as LoginSessionRecord);
    return out;
  }
}

/**
 * Connection ids unique over the fleet, for the ids clients see (`pidConnectionID`). Each
 * process reserves a block from `connid:seq` (INCRBY) and hands ids out of it without asking
 * Redis; the next block is fetched in the background once half of the current one is used, so a
 * login waits on Redis only when a whole block went by during an outage.
 */
export class FleetConnectionIds {
  private next = 0;
  private end = 0;
  /** The block fetched ahead, if any. */
  private spare: { next: number; end: number } | undefined = undefined;
  private fetching: Promise<void> | undefined = undefined;
  private highest = 0;
  private readonly ctx: FleetStoreContext;
  readonly blockSize: number;

  constructor(ctx: FleetStoreContext, blockSize = 1024) {
    this.ctx = ctx;
    this.blockSize = Math.max(1, blockSize);
  }

  /** The next id: at once from the current block, else after fetching one. */
  async take(): Promise<number> {
    if (this.next >= this.end) {
      if (this.spare === undefined) await this.fetch();
      if (this.next >= this.end && this.spare !== undefined) {
        ({ next: this.next, end: this.end } = this.spare);
        this.spare = undefined;
      }
      if (this.next >= this.end) return this.take();
    }
    const id = this.next++;
    if (this.spare === undefined && this.end - this.next < this.blockSize / 2)
      void this.fetch().catch(() => {});
    return id;
  }

  private fetch(): Promise<void> {
    this.fetching ??= durablePlane(this.ctx, 'connection ids', () =>
      this.ctx.redis.client.eval(
        RESERVE_IDS_SCRIPT,
        1,
        `${keysOf(this.ctx).rmc}connid:seq`,
        String(this.blockSize),
        String(this.highest),
      ),
    )
      .then((v) => {
        const end = Number(v) + 1;
        this.highest = Math.max(this.highest, end - 1);
        this.spare = { next: end - this.blockSize, end };
      })
      .finally(() => {
        this.fetching = undefined;
      });
    return this.fetching;
  }
}
