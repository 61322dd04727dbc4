/**
 * `gamewire serve rmc --role auth|secure|all --redis URL`: one process of an RMC fleet.
 *
 * - `auth`: LoginProtocol (LoginWithToken_V1 hands out the StationURL of a live, least-loaded
 *   secure server; Register_V1), CloudServersProtocol, ApexAntitoxicityProtocol; classic:
 *   TicketGranting. Announced as `rmc-auth`.
 * - `secure`: the same HyperScape built-ins plus SessionProtocol (LoginWithToken_V1 answers the
 *   server's own URL); classic: SecureConnection (Kerberos CONNECT). Announced as `rmc-secure`
 *   with its endpoints, StationURL, capacity and player count; `drain()` takes it out of the
 *   choice.
 * - `all` with `--redis`: both in one process, on the fleet's store (announced as `rmc-secure`).
 *
 * Accounts, login sessions, SessionProtocol state, PIDs and connection ids live in Redis (see
 * redis-store.ts, redis-sessions.ts); the transports and the dispatch path never touch it.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { UsageError } from '../../../core/errors.js';
import { type NodeAnnouncement, type NodeEndpoint, RedisNodeRegistry } from '../../../core/node-registry.js';
import { connectRedis, redactRedisUrl } from '../../../core/redis.js';
import type { Endpoint, ServerContext } from '../../../core/server.js';
import type { RmcConnection } from '../dispatcher.js';
import { RmcError } from '../errors.js';
import { RMC_ROLES } from '../options.js';
import { ApexAntitoxicityProtocol, acknowledgeAll } from '../protocols/apex-antitoxicity.js';
import {
  CloudServersProtocol,
  cloudServersHandlers,
  type DatacenterConfig,
} from '../protocols/cloud-servers.js';
import { LoginProtocol, loginHandlers } from '../protocols/login.js';
import {
  type SessionOptions,
  SessionProtocol,
  type SessionSummary,
  sessionHandlers,
} from '../protocols/session.js';
import { type PrudpServeOptions, startRmcTransports } from '../prudp/serve.js';
import type { RmcServer } from '../server.js';
import type { LoginSessionRecord } from '../store.js';
import { type FleetStoreContext, STORE_UNAVAILABLE_ERROR } from './control-plane.js';
import { AUTH_NODE_KIND, NODE_ID_PATTERN, SECURE_NODE_KIND, SecureServerPicker } from './node.js';
import { RedisSessionStore } from './redis-sessions.js';
import { FleetConnectionIds, RedisAccountStore, type RedisAccountStoreOptions } from './redis-store.js';
import { FleetSweeper } from './sweep.js';

export { RMC_ROLES };
export type RmcRole = (typeof RMC_ROLES)[number];

export interface RmcFleetOptions {
  role: RmcRole;
  redisUrl: string;
  redisPrefix: string;
  nodeId?: string;
  region: string;
  nodeTtlMs: number;
  storeTimeoutMs: number;
  connectionIdBlock: number;
  drain: boolean;
  /** Capacity announced by a secure server (its most connections). */
  capacity: number;
  accounts: RedisAccountStoreOptions;
  sessions: SessionOptions;
  datacenters: readonly DatacenterConfig[];
  /** `--rmc-secure-url`: overrides the URL a secure server announces. */
  secureUrl?: string;
}

/** What `serve rmc` returns in a fleet (and, with fewer powers, alone): see index.ts. */
export interface RmcFleetServer {
  endpoints: Endpoint[];
  role: RmcRole;
  /** `<kind>:<id>` of this process. */
  node: string;
  /** Stop taking new players: the auth server sends no more logins here (secure role). */
  drain(): Promise<void>;
  /** Sessions of the whole fleet, with their members and the node each is on. */
  listSessions(): Promise<SessionSummary[]>;
  /** Login sessions of the whole fleet. */
  loginSessions(): Promise<LoginSessionRecord[]>;
  /** Players on this node now (logged in on its connections). */
  players(): number;
  close(graceMs?: number): Promise<void>;
}

function nodeEndpoints(endpoints: readonly Endpoint[]): NodeEndpoint[] {
  return endpoints.map((e) => ({
    transport: e.transport === 'udp' ? 'prudp' : e.transport,
    host: e.host,
    port: e.port,
  }));
}

export async function startRmcFleet(
  server: RmcServer,
  options: PrudpServeOptions,
  ctx: ServerContext,
  o: RmcFleetOptions,
): Promise<RmcFleetServer> {
  const nodeId =
    o.nodeId ??
    `${hostname()
      .replace(/[^A-Za-z0-9._-]/g, '-')
      .slice(0, 40)}-${process.pid}`;
  if (!NODE_ID_PATTERN.test(nodeId))
    throw new UsageError(
      `rmc: --node-id must be 1 to 64 letters, digits, '.', '_' or '-', got ${JSON.stringify(nodeId)}`,
    );
  const kind = o.role === 'auth' ? AUTH_NODE_KIND : SECURE_NODE_KIND;
  const nodeRef = `${kind}:${nodeId}`;
  const log = ctx.log.child({ node: nodeRef });
  let connectedOnce = false;
  const redis = await connectRedis(o.redisUrl, {
    prefix: o.redisPrefix,
    flag: '--redis (config rmc.redis)',
    onStatus: (up) => {
      const shown = { redis: redactRedisUrl(o.redisUrl) };
      if (up && !connectedOnce) connectedOnce = true;
      else if (up) log.info(shown, 'rmc: Redis is back');
      else log.warn(shown, 'rmc: Redis is down; logins and session calls fail until it returns');
    },
    onPrimaryChange: (from, to, downMs) =>
      log.warn({ from, to, downMs }, 'rmc: Redis failed over: now on the new primary'),
  });
  ctx.metrics.store = () => redis.state!();
  const registry = new RedisNodeRegistry(redis, { ttlMs: o.nodeTtlMs });
  const incarnation = randomBytes(6).toString('hex');
  const storeCtx: FleetStoreContext = {
    redis,
    nodeRef,
    incarnation,
    timeoutMs: o.storeTimeoutMs,
    metrics: ctx.metrics,
  };
  const store = new RedisAccountStore(storeCtx, o.accounts);
  const sessions = new RedisSessionStore(storeCtx, o.sessions);
  const ids = new FleetConnectionIds(storeCtx, o.connectionIdBlock);
  const picker = new SecureServerPicker(registry, storeCtx, o.region, 2 * registry.heartbeatMs);

  // Players on this node: connections that logged in (HyperScape) or registered (classic).
  let players = 0;
  let announcement: NodeAnnouncement | undefined;
  const publishLoad = () => {
    ctx.metrics.gauges.set('players', players);
    ctx.metrics.nodeGauges.set('node_load', new Map([[nodeId, players]]));
    announcement?.update({ load: players });
  };
  const countPlayer = (conn: RmcConnection) => {
    players++;
    publishLoad();
    conn.onDisconnect(() => {
      players--;
      publishLoad();
    });
  };
  const FLEET_ID = 'fleet.connectionId';
  const connectionIdOf = (conn: RmcConnection): number | Promise<number> => {
    const known = conn.data.get(FLEET_ID) as number | undefined;
    if (known !== undefined) return known;
    return ids.take().then((id) => {
      const again = conn.data.get(FLEET_ID) as number | undefined;
      if (again !== undefined) return again;
      conn.data.set(FLEET_ID, id);
      return id;
    });
  };
  const pickUrl = async () => {
    const node = await picker.pick();
    const url = node.meta?.stationUrl;
    if (url === undefined)
      throw RmcError.of(STORE_UNAVAILABLE_ERROR, `secure server ${node.id} announced no StationURL`);
    return url;
  };

  let listening: Awaited<ReturnType<typeof startRmcTransports>>;
  try {
    listening = await startRmcTransports(
      server,
      options,
      ctx,
      store,
      (ownUrl) => {
        server.register(
          LoginProtocol,
          loginHandlers({
            store,
            metrics: server.metrics,
            secureUrl: o.role === 'auth' ? pickUrl : (o.secureUrl ?? ownUrl),
            connectionIdOf,
            ...(o.role === 'auth' ? {} : { onLogin: countPlayer }),
          }),
        );
        server.register(CloudServersProtocol, cloudServersHandlers(o.datacenters));
        if (o.role !== 'auth') server.register(SessionProtocol, sessionHandlers(sessions));
        server.register(ApexAntitoxicityProtocol, {}, { fallback: acknowledgeAll });
      },
      {
        role: o.role,
        secureUrl: pickUrl,
        connectionIdOf,
        ...(o.role === 'auth' ? {} : { onRegister: countPlayer }),
      },
    );
  } catch (err) {
    await redis.close();
    throw err;
  }

  // Records of dead nodes go when a script meets them; this sweep catches the ones nobody meets
  // (an account that never logs in again, a session nobody joins), every ten TTLs with jitter,
  // in small steps spread over time (sweep.ts), so it never holds Redis for long.
  const sweeper = new FleetSweeper([store, sessions], 10 * o.nodeTtlMs);
  let gaugeTimer: NodeJS.Timeout | undefined;
  let draining = o.drain;
  const announce = async () => {
    announcement = await registry.announce({
      id: nodeId,
      kind,
      region: o.region,
      endpoints: nodeEndpoints(listening.endpoints),
      capacity: o.capacity,
      load: players,
      draining,
      startedAt: Date.now(),
      meta: { stationUrl: o.secureUrl ?? listening.secureUrl, role: o.role, incarnation },
    });
    const a = announcement;
    const heartbeatAge = () => {
      const ageMs = Math.min(a.heartbeatAgeMs(), 3_600_000);
      ctx.metrics.gauges.set('heartbeat_age_ms', ageMs);
      ctx.metrics.nodeGauges.set('node_heartbeat_age_seconds', new Map([[nodeId, ageMs / 1000]]));
    };
    gaugeTimer = setInterval(heartbeatAge, 1000);
    gaugeTimer.unref();
    sweeper.start();
    heartbeatAge();
    publishLoad();
    log.info({ role: o.role, region: o.region, url: a.info.meta?.stationUrl }, 'rmc: fleet node announced');
  };
  if (ctx.deferAnnouncement !== undefined) ctx.deferAnnouncement(announce);
  else {
    try {
      await announce();
    } catch (err) {
      await listening.close();
      await redis.close();
      throw err;
    }
  }

  let closed: Promise<void> | undefined;
  return {
    endpoints: listening.endpoints,
    role: o.role,
    node: nodeRef,
    async drain() {
      draining = true;
      announcement?.update({ draining: true });
      log.info('rmc: draining: no new logins are sent here');
      await announcement?.flush().catch(() => {
        // Published at the next heartbeat once Redis answers.
      });
    },
    listSessions: () => sessions.listSessions(),
    loginSessions: () => store.sessions(),
    players: () => players,
    close(graceMs?: number) {
      closed ??= (async () => {
        clearInterval(gaugeTimer);
        await sweeper.close();
        // The record goes first: other nodes stop counting on this one's players at once.
        await announcement?.stop();
        await listening.close(graceMs);
        // Disconnect hooks (logouts, session leaves) have been started; give them a moment.
        await new Promise((r) => setTimeout(r, 50));
        store.cleanup.close();
        sessions.cleanup.close();
        await redis.close();
      })();
      return closed;
    },
  };
}
