/**
 * What the NoxVR relay shows the admin endpoint (docs/dashboard-api.md): instances and their
 * players with the latest Transform each sent (the relay keeps it anyway, per rig, for the
 * fan-out: nothing is added per update), connections, the map's bounds; the disconnect and end
 * instance actions; and the wire tap. State is built when asked.
 */
import { type AdminSource, done, notFound } from '../../core/admin/source.js';
import { WireTap, type WireTapOptions } from '../../core/wire-tap.js';
import type { Json } from '../../wire/codec.js';
import { PlayerFlags, QuitType } from './constants.js';
import { removePlayer } from './handlers/membership.js';
import type { Player, StoredTransform } from './instances.js';
import type { NoxRelayServer } from './server.js';

/** The rig shown on the map: the first one the player sent (rig 0, the head, when present). */
function mainTransform(p: Player): StoredTransform | undefined {
  const head = p.transforms.get(0);
  if (head !== undefined) return head;
  for (const t of p.transforms.values()) return t;
  return undefined;
}

/** performance.now() readings as ms since the epoch. */
const epochOf = (perf: number) => Math.round(performance.timeOrigin + perf);

export function noxRelayAdmin(server: NoxRelayServer, wireOptions: WireTapOptions = {}): AdminSource {
  const wire = new WireTap(wireOptions);
  server.wireTap = wire;
  for (const c of server.clients.values()) c.wireTap = wire;
  return {
    wire,
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
            minX = Math.min(minX, t.px);
            maxX = Math.max(maxX, t.px);
            minZ = Math.min(minZ, t.pz);
            maxZ = Math.max(maxZ, t.pz);
          }
          players.push({
            id: String(p.id),
            name: p.displayName,
            connection: String(p.client.id),
            userId: p.client.userId,
            bot: (p.flags & PlayerFlags.IsBot) !== 0,
            position: t === undefined ? null : { x: t.px, y: t.py, z: t.pz },
            rotation: t === undefined ? null : { x: t.rx, y: t.ry, z: t.rz, w: t.rw },
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
      disconnect(id) {
        const c = id === undefined || !/^\d+$/.test(id) ? undefined : server.clients.get(Number(id));
        if (c === undefined) return notFound('connection');
        server.disconnect(c, 'Disconnected by the server administrator.', QuitType.ModerationKick);
        return done;
      },
      endInstance(id) {
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
      },
    },
  };
}
