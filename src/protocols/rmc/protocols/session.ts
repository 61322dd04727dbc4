/**
 * SessionProtocol (HyperScape-specific): create, join and leave game sessions.
 *
 * Layout status:
 * - CreateSession_V1 arguments are **documented** (the wiki's 141-byte dump, spec §1.4): a
 *   String session type ("PartySession"), 16 raw bytes (a GUID), 9 bytes of unknown meaning
 *   (zeros in the dump) and a String that starts with the GUID in hex. Field names are ours.
 * - Its results, and JoinSession_V1 / LeaveSession_V1 entirely, are **unknown**: gamewire's
 *   choice, so that sessions have real state (members, capacity, cleanup on disconnect).
 */
import { addressKey } from '../../../core/tcp.js';
import type { CallContext, Handlers, RmcConnection } from '../dispatcher.js';
import { RmcError } from '../errors.js';
import { DEFAULT_MAX_SESSIONS_PER_ACCOUNT, DEFAULT_MAX_SESSIONS_PER_IP } from '../options.js';
import { defineProtocol, method } from '../signature.js';
import { boundedString, list, rawBytes, u32, uuid } from '../types.js';

/**
 * Most UTF-8 bytes in a session's type and key (gamewire's limit). The server keeps both for
 * the session's life and sends the type back on every JoinSession_V1, so a peer must not be
 * able to make them large. The wiki's dump has "PartySession" and a ~40-byte key.
 */
export const MAX_SESSION_STRING_BYTES = 256;
const sessionString = boundedString(MAX_SESSION_STRING_BYTES);

export const SessionProtocol = defineProtocol(
  'SessionProtocol',
  'Creates, joins and leaves game sessions (CreateSession_V1 args documented; the rest is a gamewire choice).',
  {
    CreateSession_V1: method({
      args: { sessionType: sessionString, sessionId: uuid, reserved: rawBytes(9), sessionKey: sessionString },
      results: { sessionId: uuid, memberCount: u32 },
      layout: 'inferred',
      doc: 'String type, 16-byte GUID, 9 unknown bytes, String key (documented) -> GUID, member count (gamewire choice)',
      secretFields: ['sessionKey'],
    }),
    JoinSession_V1: method({
      args: { sessionId: uuid },
      results: { sessionType: sessionString, members: list(uuid) },
      layout: 'unknown',
      doc: 'GUID -> session type and member PIDs (gamewire choice)',
    }),
    LeaveSession_V1: method({
      args: { sessionId: uuid },
      results: {},
      layout: 'unknown',
      doc: 'GUID -> nothing (gamewire choice)',
    }),
  },
);

export interface GameSession {
  id: string;
  type: string;
  key: string;
  reserved: Buffer;
  ownerPid: string;
  /** connection id -> member PID (hex). */
  members: Map<number, string>;
  /** connection id -> member's display name. */
  memberNames: Map<number, string>;
  createdAt: number;
}

export interface SessionOptions {
  /** Most members per session (default 100); more get RendezVous::SessionFull. */
  maxMembers?: number;
  /** Most sessions overall (default 10 000); more get RendezVous::LimitExceeded. */
  maxSessions?: number;
  /**
   * Most sessions one connection may be a member of at once, created ones included (default
   * 16); more get RendezVous::LimitExceeded.
   */
  maxSessionsPerConnection?: number;
  /**
   * Most session memberships (created or joined) held by the connections of one address, IPv4
   * or IPv6 /64 (default 64; 0 = no limit); more get RendezVous::LimitExceeded.
   */
  maxSessionsPerIp?: number;
  /** Most session memberships held by one account over all its connections (default 16; 0 = no limit). */
  maxSessionsPerAccount?: number;
}

// Option defaults (`rmc.maxSessionsPerIp`, `rmc.maxSessionsPerAccount`): the declaration's (options.ts).
export { DEFAULT_MAX_SESSIONS_PER_ACCOUNT, DEFAULT_MAX_SESSIONS_PER_IP };
export const DEFAULT_MAX_SESSION_MEMBERS = 100;
export const DEFAULT_MAX_SESSIONS = 10_000;
export const DEFAULT_MAX_SESSIONS_PER_CONNECTION = 16;

/** Who joins: one connection of a logged-in player. */
export interface SessionMember {
  /** The connection's id on its server (a fleet store adds the server's node id). */
  connectionId: number;
  /** PID, hex. */
  pid: string;
  name: string;
  /** The connection's remote address (the per-address cap keys it by `addressKey`). */
  address: string;
}

/** What `CreateSession_V1` records. */
export interface SessionSpec {
  id: string;
  type: string;
  key: string;
  reserved: Buffer;
}

/** A session as listed (`listSessions()`, for monitoring and the dashboard). */
export interface SessionSummary {
  id: string;
  type: string;
  key: string;
  ownerPid: string;
  /** ms since the epoch. */
  createdAt: number;
  members: { pid: string; name: string; connectionId: number; node?: string }[];
}

/**
 * SessionProtocol's state: `SessionRegistry` (one process, synchronous) or a fleet's
 * `RedisSessionStore` (fleet/redis-sessions.ts). Each method applies every limit atomically and
 * throws (or rejects with) an `RmcError`: a limit, a missing session, or the store being
 * unavailable right now.
 */
export interface SessionStore {
  /** Creates the session with `member` in it; answers the member count (a creator's repeat is no error). */
  create(
    spec: SessionSpec,
    member: SessionMember,
  ): { memberCount: number } | Promise<{ memberCount: number }>;
  /** Joins; answers the session type and its members' PIDs (hex, each once). */
  join(
    id: string,
    member: SessionMember,
  ): { type: string; members: string[] } | Promise<{ type: string; members: string[] }>;
  /** Leaves; false when the connection was not in that session. */
  leave(id: string, member: SessionMember): boolean | Promise<boolean>;
  /** The connection ended: leaves every session it is in. */
  leaveAll(connectionId: number): void | Promise<void>;
  listSessions(): SessionSummary[] | Promise<SessionSummary[]>;
}

/** The live sessions of one process, shared by every connection of one server. */
export class SessionRegistry implements SessionStore {
  readonly sessions = new Map<string, GameSession>();
  readonly maxMembers: number;
  readonly maxSessions: number;
  readonly maxSessionsPerConnection: number;
  readonly maxSessionsPerIp: number;
  readonly maxSessionsPerAccount: number;
  /** Memberships per address key and per member PID. */
  private readonly perIp = new Map<string, number>();
  private readonly perAccount = new Map<string, number>();
  /** Address key of each connection that holds memberships. */
  private readonly ipOf = new Map<number, string>();
  /** Sessions each connection is in. */
  private readonly joined = new Map<number, Set<string>>();

  constructor(options: SessionOptions = {}) {
    this.maxMembers = options.maxMembers ?? DEFAULT_MAX_SESSION_MEMBERS;
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.maxSessionsPerConnection = options.maxSessionsPerConnection ?? DEFAULT_MAX_SESSIONS_PER_CONNECTION;
    this.maxSessionsPerIp = options.maxSessionsPerIp ?? DEFAULT_MAX_SESSIONS_PER_IP;
    this.maxSessionsPerAccount = options.maxSessionsPerAccount ?? DEFAULT_MAX_SESSIONS_PER_ACCOUNT;
  }

  get(id: string): GameSession | undefined {
    return this.sessions.get(id);
  }

  /** Memberships held by the connections of `address` (an address key). */
  sessionsOfIp(address: string): number {
    return this.perIp.get(address) ?? 0;
  }

  /** Memberships held by `pid` (hex). */
  sessionsOfAccount(pid: string): number {
    return this.perAccount.get(pid) ?? 0;
  }

  /** Checks the per-address and per-account caps for one more membership, and counts it. */
  admit(connectionId: number, remoteAddress: string, pid: string): void {
    const ip = this.ipOf.get(connectionId) ?? addressKey(remoteAddress);
    const ipCount = this.perIp.get(ip) ?? 0;
    if (this.maxSessionsPerIp > 0 && ipCount >= this.maxSessionsPerIp)
      throw RmcError.of(
        'RendezVous::LimitExceeded',
        `the connections of one address may be in at most ${this.maxSessionsPerIp} sessions`,
      );
    const accountCount = this.perAccount.get(pid) ?? 0;
    if (this.maxSessionsPerAccount > 0 && accountCount >= this.maxSessionsPerAccount)
      throw RmcError.of(
        'RendezVous::LimitExceeded',
        `an account may be in at most ${this.maxSessionsPerAccount} sessions`,
      );
    this.ipOf.set(connectionId, ip);
    this.perIp.set(ip, ipCount + 1);
    this.perAccount.set(pid, accountCount + 1);
  }

  create(spec: SessionSpec, member: SessionMember): { memberCount: number } {
    let s = this.sessions.get(spec.id);
    if (s === undefined) {
      this.checkRoom(member.connectionId, spec.id);
      if (this.sessions.size >= this.maxSessions) throw RmcError.of('RendezVous::LimitExceeded');
      s = {
        id: spec.id,
        type: spec.type,
        key: spec.key,
        reserved: spec.reserved,
        ownerPid: member.pid,
        members: new Map(),
        memberNames: new Map(),
        createdAt: Date.now(),
      };
      // Joined first: a refused creator leaves no empty session behind.
      this.add(s, member);
      this.sessions.set(spec.id, s);
    } else if (!s.members.has(member.connectionId)) {
      throw RmcError.of('RendezVous::DuplicateEntry', `session ${spec.id} already exists`);
    }
    return { memberCount: s.members.size };
  }

  join(id: string, member: SessionMember): { type: string; members: string[] } {
    const s = this.sessions.get(id);
    if (s === undefined) throw RmcError.of('RendezVous::SessionVoid');
    this.checkRoom(member.connectionId, id);
    this.add(s, member);
    return { type: s.type, members: [...new Set(s.members.values())] };
  }

  /** Removes a connection from a session; deletes the session when it is empty. */
  leave(id: string, member: SessionMember | number): boolean {
    const connectionId = typeof member === 'number' ? member : member.connectionId;
    const s = this.sessions.get(id);
    const pid = s?.members.get(connectionId);
    if (s === undefined || pid === undefined) return false;
    s.members.delete(connectionId);
    s.memberNames.delete(connectionId);
    if (s.members.size === 0) this.sessions.delete(id);
    const ip = this.ipOf.get(connectionId);
    if (ip !== undefined) decrement(this.perIp, ip);
    decrement(this.perAccount, pid);
    const joined = this.joined.get(connectionId);
    joined?.delete(id);
    if (joined?.size === 0) this.joined.delete(connectionId);
    return true;
  }

  leaveAll(connectionId: number): void {
    for (const id of [...(this.joined.get(connectionId) ?? [])]) this.leave(id, connectionId);
    this.forget(connectionId);
  }

  /** The connection ended (after it left every session). */
  forget(connectionId: number): void {
    this.ipOf.delete(connectionId);
    this.joined.delete(connectionId);
  }

  listSessions(): SessionSummary[] {
    return [...this.sessions.values()].map((s) => ({
      id: s.id,
      type: s.type,
      key: s.key,
      ownerPid: s.ownerPid,
      createdAt: s.createdAt,
      members: [...s.members].map(([connectionId, pid]) => ({
        pid,
        name: s.memberNames.get(connectionId) ?? '',
        connectionId,
      })),
    }));
  }

  /** Refuses a connection that is already in `maxSessionsPerConnection` sessions. */
  private checkRoom(connectionId: number, id: string): void {
    const joined = this.joined.get(connectionId);
    if (joined !== undefined && !joined.has(id) && joined.size >= this.maxSessionsPerConnection)
      throw RmcError.of(
        'RendezVous::LimitExceeded',
        `a connection may be in at most ${this.maxSessionsPerConnection} sessions`,
      );
  }

  private add(s: GameSession, member: SessionMember): void {
    if (s.members.has(member.connectionId)) return;
    if (s.members.size >= this.maxMembers) throw RmcError.of('RendezVous::SessionFull');
    this.admit(member.connectionId, member.address, member.pid);
    s.members.set(member.connectionId, member.pid);
    s.memberNames.set(member.connectionId, member.name);
    let joined = this.joined.get(member.connectionId);
    if (joined === undefined) {
      joined = new Set();
      this.joined.set(member.connectionId, joined);
    }
    joined.add(s.id);
  }
}

function decrement(map: Map<string, number>, key: string): void {
  const left = (map.get(key) ?? 1) - 1;
  if (left <= 0) map.delete(key);
  else map.set(key, left);
}

function memberOf(ctx: CallContext): SessionMember {
  const conn = ctx.connection;
  const user = conn.user;
  if (user === undefined) throw RmcError.of('RendezVous::NotAuthenticated');
  return {
    connectionId: conn.id,
    pid: user.pid.toString('hex'),
    name: user.name,
    address: conn.remoteAddress,
  };
}

const HOOKED_KEY = 'SessionProtocol.hooked';

/** Leaves every session when the connection ends (one hook per connection). */
function hookDisconnect(conn: RmcConnection, store: SessionStore): void {
  if (conn.data.has(HOOKED_KEY)) return;
  conn.data.set(HOOKED_KEY, true);
  conn.onDisconnect(() => store.leaveAll(conn.id));
}

export function sessionHandlers(store: SessionStore): Handlers<typeof SessionProtocol> {
  return {
    async CreateSession_V1(ctx, args) {
      const member = memberOf(ctx);
      hookDisconnect(ctx.connection, store);
      const spec = {
        id: args.sessionId.toString('hex'),
        type: args.sessionType,
        key: args.sessionKey,
        reserved: args.reserved,
      };
      const { memberCount } = await store.create(spec, member);
      return { sessionId: args.sessionId, memberCount };
    },
    async JoinSession_V1(ctx, args) {
      const member = memberOf(ctx);
      hookDisconnect(ctx.connection, store);
      const s = await store.join(args.sessionId.toString('hex'), member);
      return { sessionType: s.type, members: s.members.map((p) => Buffer.from(p, 'hex')) };
    },
    async LeaveSession_V1(ctx, args) {
      const member = memberOf(ctx);
      if (!(await store.leave(args.sessionId.toString('hex'), member)))
        throw RmcError.of('RendezVous::SessionVoid');
      return {};
    },
  };
}
