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
}

/** The live sessions, shared by every connection of one server. */
export class SessionRegistry {
  readonly sessions = new Map<string, GameSession>();
  readonly maxMembers: number;
  readonly maxSessions: number;
  readonly maxSessionsPerConnection: number;

  constructor(options: SessionOptions = {}) {
    this.maxMembers = options.maxMembers ?? 100;
    this.maxSessions = options.maxSessions ?? 10_000;
    this.maxSessionsPerConnection = options.maxSessionsPerConnection ?? 16;
  }

  get(id: string): GameSession | undefined {
    return this.sessions.get(id);
  }

  /** Removes a connection from a session; deletes the session when it is empty. */
  leave(id: string, connectionId: number): boolean {
    const s = this.sessions.get(id);
    if (s === undefined || !s.members.delete(connectionId)) return false;
    if (s.members.size === 0) this.sessions.delete(id);
    return true;
  }
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
    });
  }
  return set;
}

function join(registry: SessionRegistry, s: GameSession, conn: RmcConnection, pid: string): void {
  if (!s.members.has(conn.id) && s.members.size >= registry.maxMembers)
    throw RmcError.of('RendezVous::SessionFull');
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
        registry.sessions.set(id, s);
      } else if (!s.members.has(ctx.connection.id)) {
        throw RmcError.of('RendezVous::DuplicateEntry', `session ${id} already exists`);
      }
      join(registry, s, ctx.connection, pid);
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
