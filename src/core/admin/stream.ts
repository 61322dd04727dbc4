/**
 * `GET /api/stream`: the dashboard's event stream (text/event-stream). One timer serves every
 * stream and runs only while one is open; a state is built once per tick and protocol however
 * many clients watch it; a client that does not keep up skips ticks until it drains (never more
 * than one event of each kind per tick), and one that has read nothing for `stalledStreamMs` is
 * closed, so stalled clients cannot hold the slots.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { ServerDetailJson, TickJson, WireEventJson } from './api-types.js';
import {
  type AdminServerEntry,
  BASE_HEADERS,
  countersOf,
  detailJson,
  parseUrl,
  sendError,
  wireMessages,
} from './http.js';

export interface StreamOptions {
  servers: () => readonly AdminServerEntry[];
  tickMs: number;
  pingMs: number;
  maxStreams: number;
  maxWirePerEvent: number;
  stalledStreamMs: number;
}

interface Stream {
  res: ServerResponse;
  protocol: string | undefined;
  wire: string | undefined;
  wireAfter: number;
  /** Still writing the last event: skip this tick (at most one event of each kind per tick). */
  busy: boolean;
  /** When it became busy (a client that never reads is closed after `stalledStreamMs`). */
  busySince: number;
}

export interface EventStreams {
  /** Streams open now. */
  readonly size: number;
  /** Ends every stream (the endpoint is closing). */
  closeAll(): void;
}

export function registerStream(app: FastifyInstance, options: StreamOptions): EventStreams {
  const streams = new Set<Stream>();
  let tickTimer: NodeJS.Timeout | undefined;
  let pingTimer: NodeJS.Timeout | undefined;

  const writeEvent = (st: Stream, event: string, data: unknown): void => {
    if (st.res.writableEnded) return;
    const ok = st.res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    if (!ok && !st.busy) {
      st.busy = true;
      st.busySince = Date.now();
      st.res.once('drain', () => {
        st.busy = false;
      });
    }
  };

  let ticking = false;
  const tick = () => {
    // A state may come from a store (a fleet's Redis): never two ticks at once.
    if (streams.size === 0 || ticking) return;
    ticking = true;
    runTick()
      .catch(() => {})
      .finally(() => {
        ticking = false;
      });
  };

  const runTick = async () => {
    const servers = options.servers();
    const t = Date.now();
    const overview: TickJson = {
      t,
      servers: servers.map((s) => ({ protocol: s.protocol, counters: countersOf(s.metrics) })),
    };
    // State is built once per tick and protocol, whatever the number of clients watching it.
    const states = new Map<string, Promise<ServerDetailJson>>();
    for (const st of [...streams]) {
      if (st.busy) {
        if (t - st.busySince > options.stalledStreamMs) {
          st.res.destroy();
          remove(st);
        }
        continue;
      }
      writeEvent(st, 'tick', overview);
      if (st.protocol !== undefined) {
        const s = servers.find((x) => x.protocol === st.protocol);
        if (s !== undefined) {
          let body = states.get(s.protocol);
          if (body === undefined) {
            body = detailJson(s);
            states.set(s.protocol, body);
          }
          try {
            writeEvent(st, 'state', await body);
          } catch {
            // the store did not answer this tick; the next one tries again
          }
        }
      }
      if (st.wire !== undefined) {
        const s = servers.find((x) => x.protocol === st.wire);
        if (s !== undefined) {
          const messages = wireMessages(s, st.wireAfter, options.maxWirePerEvent);
          if (messages.length > 0) st.wireAfter = messages[messages.length - 1]!.seq;
          writeEvent(st, 'wire', { messages } satisfies WireEventJson);
        }
      }
    }
  };

  const ping = () => {
    for (const st of streams) if (!st.busy && !st.res.writableEnded) st.res.write(': ping\n\n');
  };

  const remove = (st: Stream) => {
    streams.delete(st);
    if (streams.size === 0) {
      clearInterval(tickTimer);
      clearInterval(pingTimer);
      tickTimer = undefined;
      pingTimer = undefined;
    }
  };

  app.get('/api/stream', async (req, reply) => {
    if (streams.size >= options.maxStreams) {
      return sendError(reply, 503, `too many event streams open (${options.maxStreams})`);
    }
    const query = parseUrl(req.url)?.searchParams;
    const protocol = query?.get('protocol') ?? undefined;
    const wire = query?.get('wire') ?? undefined;
    // The stream outlives this handler: fastify hands the socket over.
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      ...BASE_HEADERS,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write(`retry: 2000\n\n`);
    const wireServer = wire === undefined ? undefined : options.servers().find((s) => s.protocol === wire);
    const st: Stream = {
      res,
      protocol,
      wire,
      // A new wire client starts from now, not from the whole ring.
      wireAfter: wireServer?.admin?.wire !== undefined ? wireServer.admin.wire.next - 1 : 0,
      busy: false,
      busySince: 0,
    };
    wireServer?.admin?.wire?.arm();
    streams.add(st);
    const done = () => remove(st);
    req.raw.on('close', done);
    res.on('close', done);
    res.on('error', done);
    if (tickTimer === undefined) {
      tickTimer = setInterval(tick, options.tickMs);
      pingTimer = setInterval(ping, options.pingMs);
    }
    // The first tick at once, so a page has data without waiting a second.
    setImmediate(tick);
  });

  return {
    get size() {
      return streams.size;
    },
    closeAll() {
      for (const st of [...streams]) {
        st.res.end();
        remove(st);
      }
    },
  };
}
