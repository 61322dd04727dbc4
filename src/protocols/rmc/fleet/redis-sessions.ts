/**
 * SessionProtocol's state for a fleet, in Redis, so players on different secure servers find,
 * join and see each other in the same session. Each call is one Lua script that checks every
 * limit of the embedded `SessionRegistry` and writes, atomically.
 *
 * Keys (under `<prefix>rmc:`):
 * - `sessions`: set of session ids (its size is checked against `maxSessions`);
 * - `session:<id>`: hash `type`, `key`, `reserved` (hex), `owner` (PID), `createdAt` (ms);
 * - `session:<id>:members`: hash, member ref -> `{pid, name, ip}` JSON;
 * - `conn:<ref>`: set of the session ids that connection is in (`maxSessionsPerConnection`);
 * - `ipm:<address key>`, `accm:<pid>`: sets of `<session id>|<ref>` memberships
 *   (`maxSessionsPerIp`, `maxSessionsPerAccount`).
 *
 * A member ref is `<node kind>:<node id>#<connection id>`: the secure server holding the
 * connection and the connection's id there. When a server dies, its node record expires
 * (node-registry.ts); any script that meets one of its memberships then removes it (and the
 * session, once empty), so its players leave their sessions within the node TTL of the next
 * look, without anyone having to clean up after it (after a Redis outage longer than the TTL,
 * only once the fleet's grace period is over: `LUA_ALIVE` in control-plane.ts).
 *
 * SessionProtocol has no notifications (no method the server calls on a member), so nothing is
 * pushed between servers: every Join answers the member list as Redis has it at that moment.
 */

import { addressKey } from '../../../core/tcp.js';
import { RmcError } from '../errors.js';
import {
  DEFAULT_MAX_SESSION_MEMBERS,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_MAX_SESSIONS_PER_ACCOUNT,
  DEFAULT_MAX_SESSIONS_PER_CONNECTION,
  DEFAULT_MAX_SESSIONS_PER_IP,
  type SessionMember,
  type SessionOptions,
  type SessionSpec,
  type SessionStore,
  type SessionSummary,
} from '../protocols/session.js';
import {
  CleanupQueue,
  controlPlane,
  durablePlane,
  type FleetStoreContext,
  keysOf,
  LUA_ALIVE,
  memberRef,
  parseMemberRef,
} from './control-plane.js';
import type { SweepStep } from './sweep.js';

// Every script: ARGV[1] rmc prefix, ARGV[2] fleet prefix (`<prefix>`), then its own arguments.
const PRELUDE = `${LUA_ALIVE}
local P, F = ARGV[1], ARGV[2]
local function membersKey(id) return P .. 'session:' .. id .. ':members' end
local function removeMember(id, ref)
  local M = membersKey(id)
  local raw = redis.call('HGET', M, ref)
  if not raw then return false end
  local m = cjson.decode(raw)
  redis.call('HDEL', M, ref)
  redis.call('SREM', P .. 'conn:' .. ref, id)
  redis.call('SREM', P .. 'ipm:' .. m.ip, id .. '|' .. ref)
  redis.call('SREM', P .. 'accm:' .. m.pid, id .. '|' .. ref)
  if redis.call('HLEN', M) == 0 then
    redis.call('DEL', P .. 'session:' .. id)
    redis.call('SREM', P .. 'sessions', id)
  end
  return true
end
local function purgeSession(id)
  for _, r in ipairs(redis.call('HKEYS', membersKey(id))) do
    if not alive(F, r) then removeMember(id, r) end
  end
  if redis.call('EXISTS', P .. 'session:' .. id) == 0 then
    redis.call('SREM', P .. 'sessions', id)
    redis.call('DEL', membersKey(id))
    return false
  end
  return true
end
local function purgeTokens(key)
  for _, tok in ipairs(redis.call('SMEMBERS', key)) do
    local id, ref = string.match(tok, '^([^|]*)|(.*)$')
    if id == nil or redis.call('HEXISTS', membersKey(id), ref) == 0 then
      redis.call('SREM', key, tok)
    elseif not alive(F, ref) then
      removeMember(id, ref)
      redis.call('SREM', key, tok)
    end
  end
  return redis.call('SCARD', key)
end
-- Checks the per-connection, per-address and per-account caps for one more membership.
local function admit(ref, ip, pid, maxConn, maxIp, maxAcct)
  if redis.call('SCARD', P .. 'conn:' .. ref) >= maxConn then return 'conn' end
  if maxIp > 0 and purgeTokens(P .. 'ipm:' .. ip) >= maxIp then return 'ip' end
  if maxAcct > 0 and purgeTokens(P .. 'accm:' .. pid) >= maxAcct then return 'account' end
  return nil
end
local function add(id, ref, ip, pid, json)
  redis.call('HSET', membersKey(id), ref, json)
  redis.call('SADD', P .. 'conn:' .. ref, id)
  redis.call('SADD', P .. 'ipm:' .. ip, id .. '|' .. ref)
  redis.call('SADD', P .. 'accm:' .. pid, id .. '|' .. ref)
end
`;

// ARGV[3..]: id, ref, member JSON, ip, pid, type, key, reserved hex, maxMembers, maxSessions,
// maxPerConnection, maxPerIp, maxPerAccount.
// Returns {'ok', memberCount} or {'err', which}.
const CREATE_SCRIPT = `${PRELUDE}
local id, ref, json, ip, pid = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local S = P .. 'session:' .. id
if redis.call('EXISTS', S) == 1 and purgeSession(id) then
  if redis.call('HEXISTS', membersKey(id), ref) == 1 then
    return { 'ok', redis.call('HLEN', membersKey(id)) }
  end
  return { 'err', 'duplicate' }
end
local maxMembers, maxSessions = tonumber(ARGV[11]), tonumber(ARGV[12])
if redis.call('SCARD', P .. 'conn:' .. ref) >= tonumber(ARGV[13]) then return { 'err', 'conn' } end
if redis.call('SCARD', P .. 'sessions') >= maxSessions then
  for _, other in ipairs(redis.call('SMEMBERS', P .. 'sessions')) do purgeSession(other) end
  if redis.call('SCARD', P .. 'sessions') >= maxSessions then return { 'err', 'sessions' } end
end
if maxMembers < 1 then return { 'err', 'full' } end
local refused = admit(ref, ip, pid, tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]))
if refused then return { 'err', refused } end
local t = redis.call('TIME')
redis.call('HSET', S, 'type', ARGV[8], 'key', ARGV[9], 'reserved', ARGV[10], 'owner', pid,
  'createdAt', tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
redis.call('SADD', P .. 'sessions', id)
add(id, ref, ip, pid, json)
return { 'ok', 1 }`;

// ARGV[3..]: id, ref, member JSON, ip, pid, maxMembers, maxPerConnection, maxPerIp, maxPerAccount.
// Returns {'ok', type, pid1, pid2, …} or {'err', which}.
const JOIN_SCRIPT = `${PRELUDE}
local id, ref, json, ip, pid = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local S = P .. 'session:' .. id
if redis.call('EXISTS', S) == 0 or not purgeSession(id) then return { 'err', 'void' } end
local M = membersKey(id)
if redis.call('HEXISTS', M, ref) == 0 then
  if redis.call('SCARD', P .. 'conn:' .. ref) >= tonumber(ARGV[9]) then return { 'err', 'conn' } end
  if redis.call('HLEN', M) >= tonumber(ARGV[8]) then return { 'err', 'full' } end
  local refused = admit(ref, ip, pid, tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))
  if refused then return { 'err', refused } end
  add(id, ref, ip, pid, json)
end
local out = { 'ok', redis.call('HGET', S, 'type') }
local seen = {}
for _, raw in ipairs(redis.call('HVALS', M)) do
  local p = cjson.decode(raw).pid
  if not seen[p] then
    seen[p] = true
    out[#out + 1] = p
  end
end
return out`;

// ARGV[3..]: id, ref. Returns 1 when it was a member.
const LEAVE_SCRIPT = `${PRELUDE}
if removeMember(ARGV[3], ARGV[4]) then return 1 end
return 0`;

// ARGV[3]: ref.
const LEAVE_ALL_SCRIPT = `${PRELUDE}
local ref = ARGV[3]
for _, id in ipairs(redis.call('SMEMBERS', P .. 'conn:' .. ref)) do removeMember(id, ref) end
redis.call('DEL', P .. 'conn:' .. ref)
return 1`;

// ARGV[3]: most sessions listed. Returns one JSON document.
const LIST_SCRIPT = `${PRELUDE}
local out = {}
local limit = tonumber(ARGV[3])
for _, id in ipairs(redis.call('SMEMBERS', P .. 'sessions')) do
  if #out >= limit then break end
  if purgeSession(id) then
    local h = redis.call('HGETALL', P .. 'session:' .. id)
    local s = { id = id, members = {} }
    for i = 1, #h, 2 do s[h[i]] = h[i + 1] end
    local m = redis.call('HGETALL', membersKey(id))
    for i = 1, #m, 2 do
      local v = cjson.decode(m[i + 1])
      v.ref = m[i]
      s.members[#s.members + 1] = v
    end
    out[#out + 1] = s
  end
end
return cjson.encode(out)`;

// ARGV[3..]: cursor, count. One bounded step of the sweep: looks at about count sessions from the
// cursor, drops their dead nodes' members (and each session left empty). Returns {next cursor,
// looked at, sessions dropped}: nothing large.
const SWEEP_SCRIPT = `${PRELUDE}
local r = redis.call('SSCAN', P .. 'sessions', ARGV[3], 'COUNT', tonumber(ARGV[4]))
local dropped = 0
for _, id in ipairs(r[2]) do
  if not purgeSession(id) then dropped = dropped + 1 end
end
return { r[1], #r[2], dropped }`;

const REFUSALS: Record<string, () => RmcError> = {
  duplicate: () => RmcError.of('RendezVous::DuplicateEntry', 'that session already exists'),
  void: () => RmcError.of('RendezVous::SessionVoid'),
  full: () => RmcError.of('RendezVous::SessionFull'),
  sessions: () => RmcError.of('RendezVous::LimitExceeded', 'the fleet holds its most sessions'),
};

export class RedisSessionStore implements SessionStore {
  readonly maxMembers: number;
  readonly maxSessions: number;
  readonly maxSessionsPerConnection: number;
  readonly maxSessionsPerIp: number;
  readonly maxSessionsPerAccount: number;
  private readonly ctx: FleetStoreContext;
  private readonly keys: ReturnType<typeof keysOf>;

  constructor(ctx: FleetStoreContext, options: SessionOptions = {}) {
    this.ctx = ctx;
    this.keys = keysOf(ctx);
    this.cleanup = new CleanupQueue(ctx);
    this.maxMembers = options.maxMembers ?? DEFAULT_MAX_SESSION_MEMBERS;
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.maxSessionsPerConnection = options.maxSessionsPerConnection ?? DEFAULT_MAX_SESSIONS_PER_CONNECTION;
    this.maxSessionsPerIp = options.maxSessionsPerIp ?? DEFAULT_MAX_SESSIONS_PER_IP;
    this.maxSessionsPerAccount = options.maxSessionsPerAccount ?? DEFAULT_MAX_SESSIONS_PER_ACCOUNT;
  }

  private ref(connectionId: number): string {
    return memberRef(this.ctx, connectionId);
  }

  private refusal(which: string): RmcError {
    const known = REFUSALS[which];
    if (known !== undefined) return known();
    const message =
      which === 'conn'
        ? `a connection may be in at most ${this.maxSessionsPerConnection} sessions`
        : which === 'ip'
          ? `the connections of one address may be in at most ${this.maxSessionsPerIp} sessions`
          : `an account may be in at most ${this.maxSessionsPerAccount} sessions`;
    return RmcError.of('RendezVous::LimitExceeded', message);
  }

  private member(m: SessionMember): [string, string, string, string] {
    const ip = addressKey(m.address);
    return [this.ref(m.connectionId), JSON.stringify({ pid: m.pid, name: m.name, ip }), ip, m.pid];
  }

  async create(spec: SessionSpec, member: SessionMember): Promise<{ memberCount: number }> {
    const reply = (await durablePlane(this.ctx, 'session create', () =>
      this.ctx.redis.client.eval(
        CREATE_SCRIPT,
        0,
        this.keys.rmc,
        this.keys.fleet,
        spec.id,
        ...this.member(member),
        spec.type,
        spec.key,
        spec.reserved.toString('hex'),
        String(this.maxMembers),
        String(this.maxSessions),
        String(this.maxSessionsPerConnection),
        String(this.maxSessionsPerIp),
        String(this.maxSessionsPerAccount),
      ),
    )) as [string, string | number];
    if (reply[0] !== 'ok') throw this.refusal(String(reply[1]));
    return { memberCount: Number(reply[1]) };
  }

  async join(id: string, member: SessionMember): Promise<{ type: string; members: string[] }> {
    const reply = (await durablePlane(this.ctx, 'session join', () =>
      this.ctx.redis.client.eval(
        JOIN_SCRIPT,
        0,
        this.keys.rmc,
        this.keys.fleet,
        id,
        ...this.member(member),
        String(this.maxMembers),
        String(this.maxSessionsPerConnection),
        String(this.maxSessionsPerIp),
        String(this.maxSessionsPerAccount),
      ),
    )) as string[];
    if (reply[0] !== 'ok') throw this.refusal(String(reply[1]));
    return { type: reply[1]!, members: reply.slice(2) };
  }

  async leave(id: string, member: SessionMember): Promise<boolean> {
    const r = await durablePlane(this.ctx, 'session leave', () =>
      this.ctx.redis.client.eval(
        LEAVE_SCRIPT,
        0,
        this.keys.rmc,
        this.keys.fleet,
        id,
        this.ref(member.connectionId),
      ),
    );
    return r === 1;
  }

  /** Session leaves of closed connections waiting for Redis to come back. */
  readonly cleanup: CleanupQueue;

  async leaveAll(connectionId: number): Promise<void> {
    await this.cleanup.run('session leave', () =>
      this.ctx.redis.client.eval(LEAVE_ALL_SCRIPT, 0, this.keys.rmc, this.keys.fleet, this.ref(connectionId)),
    );
  }

  /**
   * One bounded step of the background sweep (sweep.ts): about `count` sessions from `cursor`,
   * each checked for members of dead nodes (at most `maxMembers` each).
   */
  async sweepStep(cursor: string, count: number): Promise<SweepStep> {
    const [next, scanned, dropped] = (await controlPlane(this.ctx, 'session sweep', () =>
      this.ctx.redis.client.eval(SWEEP_SCRIPT, 0, this.keys.rmc, this.keys.fleet, cursor, String(count)),
    )) as [string, number, number];
    return { cursor: String(next), scanned: Number(scanned), dropped: Number(dropped) };
  }

  /** Sessions with their members (one script over up to `limit`: for listings, not sweeps). */
  async listSessions(limit = this.maxSessions): Promise<SessionSummary[]> {
    const raw = (await controlPlane(this.ctx, 'session list', () =>
      this.ctx.redis.client.eval(LIST_SCRIPT, 0, this.keys.rmc, this.keys.fleet, String(limit)),
    )) as string;
    // cjson encodes an empty table as an object.
    const parsed = JSON.parse(raw) as unknown;
    if (!Array.isArray(parsed)) return [];
    return parsed.map((s: Record<string, unknown>) => ({
      id: String(s.id),
      type: String(s.type ?? ''),
      key: String(s.key ?? ''),
      ownerPid: String(s.owner ?? ''),
      createdAt: Number(s.createdAt ?? 0),
      members: (Array.isArray(s.members) ? s.members : []).map((m: Record<string, unknown>) => {
        const { node, connectionId } = parseMemberRef(String(m.ref));
        return { pid: String(m.pid), name: String(m.name), connectionId, node };
      }),
    }));
  }
}
