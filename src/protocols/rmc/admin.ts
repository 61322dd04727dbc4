/**
 * What an RMC server shows the admin endpoint (docs/dashboard-api.md): connections (TCP and
 * PRUDP) with who is logged in, the SessionProtocol sessions, the last calls answered; the
 * disconnect action; and the wire tap (whole RMC frames, after PRUDP). Built when asked.
 */
import { type AdminSource, done, notFound } from '../../core/admin/source.js';
import { codecDecoder } from '../../core/admin/wire-json.js';
import { WireTap, type WireTapOptions } from '../../core/wire-tap.js';
import type { Json } from '../../wire/codec.js';
import { rmcCodec } from './codec.js';
import type { RmcConnection } from './connection.js';
import type { RmcDispatcher } from './dispatcher.js';
import type { RmcVariant } from './messages.js';
import type { SessionSummary } from './protocols/session.js';

/** A PID as the dashboard shows it: the number of a 4-byte (NEX) PID, the hex of a UUID one. */
function pidJson(pid: Buffer): number | string {
  return pid.length === 4 ? pid.readUInt32LE(0) : pid.toString('hex');
}

/** Hex PIDs of sessions as numbers where they are 4-byte (NEX) ones. */
function hexPidJson(hex: string): number | string {
  return hex.length === 8 ? Buffer.from(hex, 'hex').readUInt32LE(0) : hex;
}

export interface RmcAdminParts {
  dispatcher: RmcDispatcher;
  variant: RmcVariant;
  /** SessionProtocol's sessions (this process's registry, or the fleet's store). */
  listSessions?: () => SessionSummary[] | Promise<SessionSummary[]>;
  /** Stop taking new players (a fleet node); absent where draining means nothing (409). */
  drain?: () => Promise<void>;
  wire?: WireTapOptions;
}

export function rmcAdmin(parts: RmcAdminParts): AdminSource {
  const { dispatcher } = parts;
  const wire = new WireTap(parts.wire);
  dispatcher.wireTap = wire;
  const find = (id: string | undefined): RmcConnection | undefined => {
    if (id === undefined) return undefined;
    for (const c of dispatcher.liveConnections()) if (String(c.id) === id) return c;
    return undefined;
  };
  return {
    wire,
    decode: codecDecoder(rmcCodec, { variant: parts.variant }),
    async state() {
      const connections: Json[] = [];
      for (const c of dispatcher.liveConnections()) {
        connections.push({
          id: String(c.id),
          remote: c.remoteAddress.includes(':')
            ? `[${c.remoteAddress}]:${c.remotePort}`
            : `${c.remoteAddress}:${c.remotePort}`,
          transport: c.transport,
          pid: c.user === undefined ? null : pidJson(c.user.pid),
          user: c.user?.name ?? null,
          since: c.openedAt,
          secure: c.data.has('prudp.pid'),
        });
      }
      const sessions: Json[] = [];
      // The session key is a secret of its members: never listed.
      for (const s of (await parts.listSessions?.()) ?? []) {
        sessions.push({
          id: s.id,
          type: s.type,
          host: hexPidJson(s.ownerPid),
          members: [...new Set(s.members.map((m) => m.pid))].map(hexPidJson),
          attributes: {
            type: s.type,
            createdAt: s.createdAt,
            memberNames: s.members.map((m) => m.name),
            nodes: [...new Set(s.members.map((m) => m.node ?? 'local'))],
          },
        });
      }
      return { connections, sessions, recentCalls: dispatcher.recentCalls.list() as unknown as Json };
    },
    actions: {
      ...(parts.drain === undefined
        ? {}
        : {
            drain: async () => {
              await parts.drain!();
              return done;
            },
          }),
      disconnect(id) {
        const c = find(id);
        if (c === undefined) return notFound('connection');
        c.close();
        return done;
      },
    },
  };
}
