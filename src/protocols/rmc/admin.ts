/**
 * What an RMC server shows the admin endpoint (docs/dashboard-api.md): connections (TCP and
 * PRUDP) with who is logged in, the SessionProtocol sessions, the last calls answered; the
 * disconnect action; and the wire tap (whole RMC frames, after PRUDP). Built when asked.
 */
import { collect, REDACTED } from '../../core/admin/redact.js';
import { type AdminSource, done, notFound, objectAction, serverAction } from '../../core/admin/source.js';
import type { WireDecoder } from '../../core/admin/wire-json.js';
import { WireTap, type WireTapOptions } from '../../core/wire-tap.js';
import type { Json } from '../../wire/codec.js';
import { decodeStream, typedOrHex } from './codec.js';
import type { RmcConnection } from './connection.js';
import type { RmcDispatcher } from './dispatcher.js';
import type { RmcVariant } from './messages.js';
import { BUILTIN_PROTOCOLS } from './protocols/index.js';
import { SecureConnectionProtocol } from './protocols/secure-connection.js';
import type { SessionSummary } from './protocols/session.js';
import { TicketGrantingProtocol } from './protocols/ticket-granting.js';
import { type MethodDef, type ProtocolDef, shortMethodName } from './signature.js';

/** The declarations the wire view knows: the HyperScape built-ins and the classic ones. */
const VIEW_PROTOCOLS: readonly ProtocolDef<any>[] = [
  ...BUILTIN_PROTOCOLS,
  TicketGrantingProtocol,
  SecureConnectionProtocol,
];

function viewMethod(p: Record<string, Json>, protocols: readonly ProtocolDef<any>[]): MethodDef | undefined {
  if (typeof p.protocolId === 'number' && typeof p.methodId === 'number') {
    return protocols.find((d) => d.id === p.protocolId)?.byId.get(p.methodId);
  }
  if (typeof p.protocol !== 'string' || typeof p.method !== 'string') return undefined;
  const wireName = p.type === 'response' ? p.method.replace(/\*$/, '') : p.method;
  for (const d of protocols) {
    if (d.name !== p.protocol) continue;
    const short = shortMethodName(d.name, wireName);
    return short === undefined ? undefined : d.byName.get(short);
  }
  return undefined;
}

/**
 * The wire view's RMC decoder: `gamewire decode rmc`, plus named fields for the classic
 * protocols it knows (the CLI prints classic bodies as hex) and for every protocol the server
 * has registered (`serve rmc --protocols` packs included), and every field a method declares
 * secret (Kerberos tickets, login tokens, session keys) masked. A secret-bearing body that does
 * not decode to fields is masked whole.
 */
export function rmcWireDecoder(
  variant: RmcVariant,
  registered: () => readonly ProtocolDef<any>[] = () => [],
): WireDecoder {
  let seen: readonly ProtocolDef<any>[] | undefined;
  let known: readonly ProtocolDef<any>[] = VIEW_PROTOCOLS;
  return (bytes, _direction, _transport, secrets) => {
    // The server's protocols first (a registration after the start is picked up), then the view's.
    const now = registered();
    if (seen === undefined || now.length !== seen.length) {
      seen = now;
      known = [...now, ...VIEW_PROTOCOLS.filter((v) => !now.some((p) => p.name === v.name))];
    }
    const protocols = known;
    const packets = decodeStream(bytes, variant, protocols).map((json) => {
      const p = json as Record<string, Json>;
      const side = p.type === 'request' ? 'args' : p.type === 'response' ? 'results' : undefined;
      const def = side === undefined ? undefined : viewMethod(p, protocols);
      if (side === undefined || def === undefined) return p;
      let body = p[side];
      if (typeof body === 'string') body = typedOrHex(def[side], Buffer.from(body, 'hex'));
      if (def.secretFields.length > 0) {
        if (typeof body === 'string') {
          collect(body, secrets);
          body = REDACTED;
        } else if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
          body = { ...body };
          for (const name of def.secretFields) {
            const v = body[name];
            if (v === undefined || v === '' || v === null) continue;
            collect(v, secrets);
            body[name] = REDACTED;
          }
        }
      }
      return { ...p, [side]: body };
    });
    return packets.length === 1 ? packets[0]! : packets;
  };
}

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
    decode: rmcWireDecoder(parts.variant, () => dispatcher.registered),
    hideUndecoded: true,
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
            drain: serverAction('drain', async () => {
              await parts.drain!();
              return done;
            }),
          }),
      disconnect: objectAction('connections', 'disconnect', (id) => {
        const c = find(id);
        if (c === undefined) return notFound('connection');
        c.close();
        return done;
      }),
    },
  };
}
