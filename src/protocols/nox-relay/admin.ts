/**
 * What the NoxVR relay shows the admin endpoint (docs/dashboard-api.md): instances and their
 * players with the latest Transform each sent (the relay keeps it anyway, per rig, for the
 * fan-out: nothing is added per update), connections, the map's bounds; the disconnect and end
 * instance actions; and the wire tap. State is built when asked.
 */
import { collect, REDACTED } from '../../core/admin/redact.js';
import { type AdminSource, done, notFound, objectAction } from '../../core/admin/source.js';
import type { WireDecoder } from '../../core/admin/wire-json.js';
import type { Direction } from '../../core/protocol.js';
import { WireTap, type WireTapOptions } from '../../core/wire-tap.js';
import type { Json } from '../../wire/codec.js';
import { decodePackets } from './codec.js';
import { PlayerFlags, QuitType } from './constants.js';
import { removePlayer } from './handlers/membership.js';
import { type Player, type StoredTransform, TRANSFORM_VECTORS } from './instances.js';
import type { NoxRelayServer } from './server.js';

/** The rig shown on the map: the first one the player sent (rig 0, the head, when present). */
function mainTransform(p: Player): StoredTransform | undefined {
  const head = p.transforms.get(0);
  if (head !== undefined) return head;
  for (const t of p.transforms.values()) return t;
  return undefined;
}

const [POSITION, ROTATION] = TRANSFORM_VECTORS;

/** A vector of a stored transform, as the dashboard shows it. */
function vectorOf(t: StoredTransform, vector: (typeof TRANSFORM_VECTORS)[number]): Json {
  const v = t.values;
  const at = vector.at;
  return vector.size === 3
    ? { x: v[at]!, y: v[at + 1]!, z: v[at + 2]! }
    : { x: v[at]!, y: v[at + 1]!, z: v[at + 2]!, w: v[at + 3]! };
}

/** Reliable entries inside Reliable entries, as deep as the view unpacks them. */
const MAX_VIEW_NESTING = 4;

function unpackForView(packet: Json, from: Direction, secrets: Buffer[], depth: number): Json {
  const p = packet as Record<string, Json>;
  if (p.type === 'Segmentation' && typeof p.segmentData === 'string' && p.segmentData !== '') {
    // A piece of a larger message (an Authentification's token, say): the reassembled message
    // is recorded and shown on its own, decoded and masked, so the piece is masked whole.
    collect(p.segmentData, secrets);
    return { ...p, segmentData: REDACTED };
  }
  if (p.type === 'Reliable' && Array.isArray(p.messages)) {
    const messages = p.messages.map((entry): Json => {
      if (typeof entry !== 'string') return entry;
      if (depth < MAX_VIEW_NESTING) {
        try {
          const inner = decodePackets(Buffer.from(entry, 'hex'), { from });
          const shown = inner.map((x) => unpackForView(x, from, secrets, depth + 1));
          return shown.length === 1 ? shown[0]! : shown;
        } catch {
          // not a packet: masked whole below
        }
      }
      collect(entry, secrets);
      return REDACTED;
    });
    return { ...p, messages };
  }
  return p;
}

/**
 * The wire view's decoder: `gamewire decode nox-relay`, with each Reliable entry decoded in
 * place (so field names find an Authentification's token inside one) and segment data masked.
 */
export const noxWireDecoder: WireDecoder = (bytes, direction, _transport, secrets) => {
  const packets = decodePackets(bytes, { from: direction }).map((p) =>
    unpackForView(p, direction, secrets, 0),
  );
  return packets.length === 1 ? packets[0]! : packets;
};

/** performance.now() readings as ms since the epoch. */
const epochOf = (perf: number) => Math.round(performance.timeOrigin + perf);

export function noxRelayAdmin(server: NoxRelayServer, wireOptions: WireTapOptions = {}): AdminSource {
  const wire = new WireTap(wireOptions);
  server.wireTap = wire;
  for (const c of server.clients.values()) c.wireTap = wire;
  return {
    wire,
    decode: noxWireDecoder,
    hideUndecoded: true,
    state() {
      let minX = Number.POSITIVE_INFINITY;
      let maxX = Number.NEGATIVE_INFINITY;
      let minZ = Number.POSITIVE_INFINITY;
      let maxZ = Number.NEGATIVE_INFINITY;
      const instances: Json[] = [];
      for (const inst of server.instances.values()) {
        const players: Json[] = [];
        for (const p of inst.members) {
          const t = mainTransform(p);
          if (t !== undefined) {
            minX = Math.min(minX, t.values[POSITION.at]!);
            maxX = Math.max(maxX, t.values[POSITION.at]!);
            minZ = Math.min(minZ, t.values[POSITION.at + 2]!);
            maxZ = Math.max(maxZ, t.values[POSITION.at + 2]!);
          }
          players.push({
            id: String(p.id),
            name: p.displayName,
            connection: String(p.client.id),
            userId: p.client.userId,
            bot: (p.flags & PlayerFlags.IsBot) !== 0,
            position: t === undefined ? null : vectorOf(t, POSITION),
            rotation: t === undefined ? null : vectorOf(t, ROTATION),
            updatedAt: t === undefined ? null : epochOf(t.lastSent),
          });
        }
        instances.push({ id: String(inst.id), name: inst.name, capacity: inst.capacity, players });
      }
      const connections: Json[] = [];
      for (const c of server.clients.values()) {
        let playerId: string | null = null;
        for (const p of c.players.values()) {
          playerId = String(p.id);
          break;
        }
        connections.push({
          id: String(c.id),
          remote: `${c.ip}:${c.port}`,
          transport: c.transport,
          playerId,
          user: c.displayName === '' ? null : c.displayName,
          since: epochOf(c.createdAt),
        });
      }
      return {
        instances,
        connections,
        bounds: Number.isFinite(minX) ? { minX, maxX, minZ, maxZ } : null,
      };
    },
    actions: {
      disconnect: objectAction('connections', 'disconnect', (id) => {
        const c = id === undefined || !/^\d+$/.test(id) ? undefined : server.clients.get(Number(id));
        if (c === undefined) return notFound('connection');
        server.disconnect(c, 'Disconnected by the server administrator.', QuitType.ModerationKick);
        return done;
      }),
      endInstance: objectAction('instances', 'end', (id) => {
        const inst = id === undefined || !/^\d+$/.test(id) ? undefined : server.instances.get(Number(id));
        if (inst === undefined) return notFound('instance');
        for (const p of [...inst.members])
          removePlayer(
            server,
            p,
            QuitType.ModerationKick,
            'The instance was ended by the server administrator.',
            null,
            0,
            true,
          );
        return done;
      }),
    },
  };
}
