/**
 * What the relay shows the admin endpoint (docs/dashboard-api.md): allocations with their
 * bindings, peers and traffic, join codes, the data plane; the disconnect and end actions; and
 * the wire tap. State is built when asked, from the store; nothing here runs per datagram.
 *
 * Per-allocation traffic is what JavaScript handled plus what the native data plane forwarded
 * (it keeps four counters per allocation, read here when asked).
 *
 * With the native data plane, RELAYs between two UDP peers never reach JavaScript. So while the
 * wire view is armed, every binding is served by the JavaScript plane (the tap then sees them),
 * and goes back to the native plane when the view disarms (10 s after the last read).
 */
import {
  type AdminActions,
  type AdminSource,
  done,
  notFound,
  objectAction,
  serverAction,
} from '../../core/admin/source.js';
import { WireTap, type WireTapOptions } from '../../core/wire-tap.js';
import type { Json } from '../../wire/codec.js';
import type { Allocation, AllocationStore } from './allocations.js';
import type { FleetAdmin, FleetNodeView } from './fleet/view.js';
import {
  BIND_LENGTH,
  BIND_SIGNED_LENGTH,
  CONNECT_REQUEST_LENGTH,
  CONNECTION_DATA_LENGTH,
  MessageType,
} from './messages.js';
import type { NativeDataplaneMirror } from './native-dataplane.js';
import type { RelayServer } from './relay.js';

/** Blanks the connection data and HMAC of BIND and CONNECT_REQUEST in a copied message. */
export function maskRelaySecrets(b: Buffer): void {
  if (b.length < 4 || b[0] !== 0xda || b[1] !== 0x72) return;
  if (b[3] === MessageType.BIND && b.length >= BIND_LENGTH) {
    b.fill(0, 8, 8 + CONNECTION_DATA_LENGTH);
    b.fill(0, BIND_SIGNED_LENGTH, BIND_LENGTH);
  } else if (b[3] === MessageType.CONNECT_REQUEST && b.length >= CONNECT_REQUEST_LENGTH) {
    b.fill(0, 21, 21 + CONNECTION_DATA_LENGTH);
  }
}

type NativeCounters =
  | { packetsIn: number; bytesIn: number; packetsOut: number; bytesOut: number }
  | undefined;

/** `native`: what the native data plane forwarded for it, added to what JavaScript handled. */
function allocationJson(a: Allocation, native: NativeCounters): Json {
  const bound = a.state === 'bound';
  return {
    id: a.guid,
    role: a.role,
    region: a.region,
    state: bound ? 'bound' : 'allocated',
    transport: bound && a.link !== undefined ? a.link.transport : null,
    boundAddress: bound
      ? a.address.includes(':')
        ? `[${a.address}]:${a.port}`
        : `${a.address}:${a.port}`
      : null,
    peers: [...a.peers].map((p) => p.guid),
    joinCode: a.joinCode ?? null,
    host: a.host?.guid ?? null,
    maxConnections: a.maxConnections,
    createdAt: a.createdAt,
    lastSeen: a.lastSeen,
    packetsIn: a.packetsIn + (native?.packetsIn ?? 0),
    packetsOut: a.packetsOut + (native?.packetsOut ?? 0),
    bytesIn: a.bytesIn + (native?.bytesIn ?? 0),
    bytesOut: a.bytesOut + (native?.bytesOut ?? 0),
  };
}

function nodeJson(n: FleetNodeView): Json {
  return {
    id: n.id,
    region: n.region,
    endpoints: n.endpoints.map((e) => ({ transport: e.transport, host: e.host, port: e.port })),
    load: n.load,
    capacity: n.capacity,
    allocations: n.allocations,
    draining: n.draining,
    heartbeatAgeMs: n.heartbeatAgeMs,
  };
}

/** Nodes of the fleet (null when not scaled out), this node's role and whether it drains. */
async function fleetJson(
  fleet: FleetAdmin | undefined,
): Promise<{ nodes: Json[] | null; role: string; draining: boolean; nodeId: string | null }> {
  const nodes = fleet === undefined ? undefined : await fleet.fleet();
  return {
    nodes: nodes === undefined ? null : nodes.map(nodeJson),
    role: fleet?.role ?? 'all',
    draining: fleet?.draining ?? false,
    nodeId: fleet?.nodeId ?? null,
  };
}

function drainAction(fleet: FleetAdmin | undefined): AdminActions {
  // A lone relay (`--role all`) has nowhere to send new allocations: 409.
  if (fleet === undefined || fleet.role === 'all') return {};
  return {
    drain: serverAction('drain', async () => {
      await fleet.drain();
      return done;
    }),
  };
}

/** An allocator of a fleet (`--role allocator`): no allocations of its own; the fleet's nodes, and drain. */
export function allocatorAdmin(fleet: FleetAdmin): AdminSource {
  return {
    async state() {
      return { allocations: [], joinCodes: [], dataplane: null, ...(await fleetJson(fleet)) };
    },
    actions: drainAction(fleet),
  };
}

export interface RelayAdminParts {
  relay: RelayServer;
  store: AllocationStore;
  dataplane: 'native' | 'js';
  nativeMirror: NativeDataplaneMirror | undefined;
  /** The fleet this relay belongs to (its live nodes, drain), when scaled out. */
  fleet?: FleetAdmin | undefined;
  wire?: WireTapOptions;
}

export function relayAdmin(parts: RelayAdminParts): AdminSource {
  const { relay, store, nativeMirror } = parts;
  const wire = new WireTap({ ...parts.wire, maskSecrets: maskRelaySecrets });
  relay.wireTap = wire;
  if (nativeMirror !== undefined) {
    wire.onArmedChange((armed) => {
      relay.syncDataplane();
      nativeMirror.setPaused(armed, store);
    });
  }
  const live = (id: string | undefined): Allocation | undefined => {
    const a = id === undefined ? undefined : store.byGuid(id);
    return a === undefined || a.state === 'expired' ? undefined : a;
  };
  return {
    wire,
    async state() {
      relay.syncDataplane();
      return {
        allocations: [...store.live()].map((a) => allocationJson(a, nativeMirror?.socket.counters(a.id))),
        joinCodes: [...store.liveJoinCodes()].map((jc) => ({
          code: jc.code,
          host: jc.host.guid,
          expiresAt: jc.expiresAt,
        })),
        dataplane: parts.dataplane,
        ...(await fleetJson(parts.fleet)),
        wireServedBy: nativeMirror !== undefined && wire.armed ? 'js' : parts.dataplane,
      };
    },
    actions: {
      ...drainAction(parts.fleet),
      // The id of a connection is its allocation's: a relay client is its allocation.
      disconnect: objectAction('connections', 'disconnect', (id) => {
        const a = live(id);
        if (a === undefined) return notFound('allocation');
        if (a.state !== 'bound') return { status: 409, error: 'that allocation is not bound' };
        relay.unbindNow(a);
        return done;
      }),
      endAllocation: objectAction('allocations', 'end', (id) => {
        const a = live(id);
        if (a === undefined) return notFound('allocation');
        relay.expireNow(a);
        return done;
      }),
    },
  };
}
