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

export const DEFAULT_MAX_SESSIONS_PER_IP = 64;
export const DEFAULT_MAX_SESSIONS_PER_ACCOUNT = 16;

/** The live sessions, shared by every connection of one server. */
export class SessionRegistry {
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

  constructor(options: SessionOptions = {}) {
    this.maxMembers = options.maxMembers ?? 100;
    this.maxSessions = options.maxSessions ?? 10_000;
    this.maxSessionsPerConnection = options.maxSessionsPerConnection ?? 16;
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

  /** Removes a connection from a session; deletes the session when it is empty. */
  leave(id: string, connectionId: number): boolean {
    const s = this.sessions.get(id);
    const pid = s?.members.get(connectionId);
    if (s === undefined || pid === undefined) return false;
    s.members.delete(connectionId);
    if (s.members.size === 0) this.sessions.delete(id);
    const ip = this.ipOf.get(connectionId);
    if (ip !== undefined) decrement(this.perIp, ip);
    decrement(this.perAccount, pid);
    return true;
  }

  /** The connection ended (after it left every session). */
  forget(connectionId: number): void {
    this.ipOf.delete(connectionId);
  }
}

function decrement(map: Map<string, number>, key: string): void {
  const left = (map.get(key) ?? 1) - 1;
  if (left <= 0) map.delete(key);
  else map.set(key, left);
}

function requireUser(ctx: CallContext): string {
  const user = ctx.connection.user;
  if (user === undefined) throw RmcError.of('RendezVous::NotAuthenticated');
  return user.pid.toString('hex');
}

const JOINED_KEY = 'SessionProtocol.joined';

function joinedSet(conn: RmcConnection, registry: SessionRegistry): Set<string> {
  let set = conn.data.get(JOINED_KEY) as Set<string> | undefined;
  if (set === undefined) {
    const s = new Set<string>();
    set = s;
    conn.data.set(JOINED_KEY, s);
    conn.onDisconnect(() => {
      for (const id of s) registry.leave(id, conn.id);
      s.clear();
      registry.forget(conn.id);
    });
  }
  return set;
}

function join(registry: SessionRegistry, s: GameSession, conn: RmcConnection, pid: string): void {
  if (s.members.has(conn.id)) return;
  if (s.members.size >= registry.maxMembers) throw RmcError.of('RendezVous::SessionFull');
  registry.admit(conn.id, conn.remoteAddress, pid);
  s.members.set(conn.id, pid);
  joinedSet(conn, registry).add(s.id);
}

/** Refuses a connection that is already in `maxSessionsPerConnection` sessions. */
function checkRoom(registry: SessionRegistry, conn: RmcConnection, id: string): void {
  const joined = joinedSet(conn, registry);
  if (!joined.has(id) && joined.size >= registry.maxSessionsPerConnection)
    throw RmcError.of(
      'RendezVous::LimitExceeded',
      `a connection may be in at most ${registry.maxSessionsPerConnection} sessions`,
    );
}

export function sessionHandlers(registry: SessionRegistry): Handlers<typeof SessionProtocol> {
  return {
    CreateSession_V1(ctx, args) {
      const pid = requireUser(ctx);
      const id = args.sessionId.toString('hex');
      let s = registry.get(id);
      if (s === undefined) {
        checkRoom(registry, ctx.connection, id);
        if (registry.sessions.size >= registry.maxSessions) throw RmcError.of('RendezVous::LimitExceeded');
        s = {
          id,
          type: args.sessionType,
          key: args.sessionKey,
          reserved: args.reserved,
          ownerPid: pid,
          members: new Map(),
          createdAt: Date.now(),
        };
        // Joined first: a refused creator leaves no empty session behind.
        join(registry, s, ctx.connection, pid);
        registry.sessions.set(id, s);
      } else if (!s.members.has(ctx.connection.id)) {
        throw RmcError.of('RendezVous::DuplicateEntry', `session ${id} already exists`);
      }
      return { sessionId: args.sessionId, memberCount: s.members.size };
    },
    JoinSession_V1(ctx, args) {
      const pid = requireUser(ctx);
      const s = registry.get(args.sessionId.toString('hex'));
      if (s === undefined) throw RmcError.of('RendezVous::SessionVoid');
      checkRoom(registry, ctx.connection, s.id);
      join(registry, s, ctx.connection, pid);
      return {
        sessionType: s.type,
        members: [...new Set(s.members.values())].map((p) => Buffer.from(p, 'hex')),
      };
    },
    LeaveSession_V1(ctx, args) {
      requireUser(ctx);
      const id = args.sessionId.toString('hex');
      if (!registry.leave(id, ctx.connection.id)) throw RmcError.of('RendezVous::SessionVoid');
      joinedSet(ctx.connection, registry).delete(id);
      return {};
    },
  };
}
