/**
 * What a JS5 server shows the admin endpoint (docs/dashboard-api.md): connections with their
 * queues and bytes served, the cache's archives; the disconnect action; and the wire tap
 * (requests, and each logical response as it starts: before the prefetch flag and XOR).
 *
 * An archive's stored size needs every group read once: that runs in the background after the
 * first state request, a few hundred groups per event-loop turn, and is then kept
 * (`storedBytesComplete` says when it is done). Until then `storedBytes` is what was read so far.
 */
import { type AdminSource, done, notFound, objectAction } from '../../core/admin/source.js';
import { WireTap, type WireTapOptions } from '../../core/wire-tap.js';
import type { Store } from './cache/store.js';
import type { Js5Server } from './server.js';

const GROUPS_PER_TURN = 256;

export function js5Admin(server: Js5Server, store: Store, wireOptions: WireTapOptions = {}): AdminSource {
  const wire = new WireTap(wireOptions);
  server.wireTap = wire;
  const sizes = new Map<number, number>();
  let scan: 'idle' | 'running' | 'done' = 'idle';
  const startScan = () => {
    if (scan !== 'idle') return;
    scan = 'running';
    const work: [number, number][] = [];
    for (const a of server.responses.archives) {
      sizes.set(a.id, 0);
      try {
        for (const g of store.list(a.id)) work.push([a.id, g]);
      } catch {
        // an unreadable archive stays at 0
      }
    }
    let i = 0;
    const step = () => {
      const stop = Math.min(work.length, i + GROUPS_PER_TURN);
      for (; i < stop; i++) {
        const [archive, group] = work[i]!;
        try {
          const b = store.read(archive, group);
          if (b !== undefined) sizes.set(archive, (sizes.get(archive) ?? 0) + b.length);
        } catch {
          // corrupt group: not counted
        }
      }
      if (i < work.length) setImmediate(step).unref?.();
      else scan = 'done';
    };
    setImmediate(step);
  };
  return {
    wire,
    state() {
      startScan();
      return {
        connections: server.connectionList().map((c) => ({
          id: String(c.id),
          remote: c.remote,
          build: server.build,
          handshaken: c.js5,
          urgentQueued: c.urgentQueued,
          prefetchQueued: c.prefetchQueued,
          inFlight: c.inFlight,
          bytesServed: c.bytesServed,
          since: c.since,
        })),
        bytesServed: server.stats.bytesSent,
        profile: server.profile.name,
        build: server.build,
        archives: server.responses.archives.map((a) => ({
          id: a.id,
          groups: a.groups,
          storedBytes: sizes.get(a.id) ?? 0,
          crc: a.crc,
          version: a.version,
        })),
        storedBytesComplete: scan === 'done',
      };
    },
    actions: {
      disconnect: objectAction('connections', 'disconnect', (id) => {
        if (id === undefined || !/^\d+$/.test(id) || !server.disconnect(Number(id)))
          return notFound('connection');
        return done;
      }),
    },
  };
}
