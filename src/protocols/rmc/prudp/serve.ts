/**
 * How `gamewire serve rmc` runs its transports: PRUDP on UDP and the framed TCP on TCP, both on
 * `--port` (9103) by default, `--rmc-transport prudp|tcp|both`; the PRUDP profile picks the RMC
 * variant, the built-in protocols and the CONNECT handling:
 *
 * - `hyperscape` (default): string-named RMC, the HyperScape built-ins, the ECDH secure CONNECT
 *   with a signing key generated on first run in the data folder (an empty CONNECT still gives a
 *   classic RC4 connection).
 * - `classic`: packed RMC, TicketGranting + SecureConnection, Kerberos secure CONNECT on the
 *   same endpoint (an empty CONNECT is an auth-server connection).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { listenOnOnePort } from '../../../core/one-port.js';
import type { ServerOptions } from '../../../core/options.js';
import { publishFileSync } from '../../../core/publish-file.js';
import type { Endpoint, ServerContext } from '../../../core/server.js';
import type { CallContext, RmcConnection } from '../dispatcher.js';
import type { PRUDP_OPTIONS } from '../options.js';
import { SecureConnectionProtocol, secureConnectionHandlers } from '../protocols/secure-connection.js';
import { TicketGrantingProtocol, ticketGrantingHandlers } from '../protocols/ticket-granting.js';
import type { RmcServer } from '../server.js';
import type { AccountStore } from '../store.js';
import { KerberosAuthority } from './kerberos.js';
import { classicConnectHandler } from './profiles.js';
import { ecdhConnectHandler, loadOrCreateSigningKey } from './secure.js';
import { PrudpServer, plainConnect } from './server.js';
import { defaultKeyWorkers, Md5ChainPool, UserKeyCache } from './user-keys.js';

export { PRUDP_OPTIONS, PRUDP_SERVE_OPTIONS, RMC_TRANSPORTS } from '../options.js';

/** What `startRmcTransports` reads: the options above, every default filled, and where to bind. */
export type PrudpServeOptions = ServerOptions<typeof PRUDP_OPTIONS>;

/**
 * Loads (or creates) the Kerberos server key in the data folder, so auth and secure roles share it.
 * Processes starting together on one folder each generate a key, but only the first to publish
 * its file wins (src/core/publish-file.ts) and all of them use the file's key; a key that is only
 * in one process's memory would make every ticket it issues fail at the other.
 */
export function loadOrCreateKerberosKey(dir: string, file = 'prudp-kerberos.key'): Buffer {
  const p = path.join(dir, file);
  const existing = readKerberosKey(p);
  if (existing.key !== undefined) return existing.key;
  mkdirSync(dir, { recursive: true });
  const fresh = `${randomBytes(32).toString('hex')}\n`;
  if (!existing.found) {
    const key = parseKerberosKey(publishFileSync(p, fresh, { mode: 0o600 }).data);
    if (key !== undefined) return key;
  }
  // An unreadable key (not 64 hex digits) is replaced whole, by rename, so no reader sees half
  // of the new one; the file is read back so that processes replacing it together mostly agree.
  const tmp = `${p}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    writeFileSync(tmp, fresh, { mode: 0o600, flag: 'wx' });
    renameSync(tmp, p);
  } finally {
    rmSync(tmp, { force: true });
  }
  return readKerberosKey(p).key ?? Buffer.from(fresh.trim(), 'hex');
}

function parseKerberosKey(text: Buffer): Buffer | undefined {
  const k = Buffer.from(text.toString('utf8').trim(), 'hex');
  return k.length === 32 ? k : undefined;
}

/** The key in `file`, if it holds one; `found` tells a missing file from an invalid one. */
function readKerberosKey(file: string): { found: boolean; key?: Buffer } {
  try {
    return { found: true, key: parseKerberosKey(readFileSync(file)) };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { found: false };
    throw err;
  }
}

export interface RmcTransports {
  endpoints: Endpoint[];
  /** This endpoint's secure-server StationURL (what a fleet's secure node publishes). */
  secureUrl: string;
  close(graceMs?: number): Promise<void>;
}

/** How a fleet role changes the classic built-ins (fleet/start.ts). */
export interface RmcRoleWiring {
  /** `auth`: TicketGranting only; `secure`: SecureConnection only; `all` (default): both. */
  role: 'auth' | 'secure' | 'all';
  /** The StationURL TicketGranting hands out, asked per login (auth: a live secure server). */
  secureUrl?: (ctx: CallContext) => Promise<string>;
  /** Fleet-unique connection ids for SecureConnection::Register. */
  connectionIdOf?: (conn: RmcConnection) => number | Promise<number>;
  /** A connection registered on this secure server (it counts as a player). */
  onRegister?: (conn: RmcConnection) => void;
}

/**
 * Registers the profile's built-in protocols on `server` and starts the transports the options
 * ask for. `registerHyperscape(secureUrl)` registers the HyperScape built-ins (hyperscape
 * profile), given the StationURL of this endpoint.
 */
export async function startRmcTransports(
  server: RmcServer,
  options: PrudpServeOptions,
  ctx: ServerContext,
  store: AccountStore,
  registerHyperscape: (secureUrl: string) => void,
  wiring: RmcRoleWiring = { role: 'all' },
): Promise<RmcTransports> {
  const { transport, prudpProfile: profile, host } = options;
  let port = options.port;
  const publicHost = options.prudpPublicHost ?? (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);
  const authority =
    profile === 'classic' ? new KerberosAuthority(loadOrCreateKerberosKey(ctx.dataDir)) : undefined;
  const endpoints: Endpoint[] = [];
  const closers: ((graceMs?: number) => Promise<void>)[] = [];
  let secureUrl = '';
  try {
    let prudp: PrudpServer | undefined;
    if (transport !== 'tcp') {
      prudp = new PrudpServer({
        dispatcher: server.dispatcher,
        log: ctx.log,
        metrics: ctx.metrics,
        profile,
        accessKey: options.prudpAccessKey,
        checksumWidth: options.prudpChecksum,
        maxConnections: options.prudpMaxConnections,
        maxConnectionsPerIp: options.prudpMaxConnectionsPerIp,
        maxHalfOpen: options.prudpMaxHalfOpen,
        maxHalfOpenPerIp: options.prudpMaxHalfOpenPerIp,
        idleTimeoutMs: options.prudpIdleTimeoutMs,
        maxReassemblyBytes: options.prudpMaxReassemblyBytes,
        retransmitMs: options.prudpRetransmitMs,
        maxRetransmits: options.prudpMaxRetransmits,
        onConnect:
          authority !== undefined
            ? classicConnectHandler(authority)
            : ecdhConnectHandler(loadOrCreateSigningKey(ctx.dataDir), plainConnect),
      });
    }
    const p = prudp;
    if (p === undefined || transport === 'both') {
      // TCP first; with port 0, PRUDP takes the port TCP got, so one number names both.
      const both = await listenOnOnePort(
        port,
        (n) => server.listen({ host, port: n }),
        (tcp) => tcp.port,
        (tcp) => tcp.close(),
        async (n) => (p === undefined ? undefined : p.listen({ host, port: n })),
      );
      endpoints.push(...both.first.endpoints);
      closers.push((g) => both.first.close(g));
      port = both.port;
      if (both.second !== undefined) {
        endpoints.push(...both.second.endpoints);
        closers.push(() => p!.close());
      }
    } else {
      const l = await p.listen({ host, port });
      port = l.port;
      endpoints.push(...l.endpoints);
      closers.push(() => p.close());
    }
    // The secure server is this same endpoint (PID 2, vport stream 3 / port 1).
    secureUrl = `prudps:/address=${publicHost};port=${port};CID=1;PID=2;sid=1;stream=3;type=2`;
    if (authority !== undefined) {
      const password = options.prudpPassword;
      // Kerberos user keys come from worker threads, and the server-wide password's 1024 keys are
      // derived once now (about 0.1 s, off the event loop): logins then never wait for one.
      const workers = options.prudpKeyWorkers;
      const pool = new Md5ChainPool({
        workers: workers === 0 ? defaultKeyWorkers() : workers,
        maxQueued: options.prudpKeyQueue,
      });
      closers.push(() => pool.close());
      const userKeys = new UserKeyCache(pool);
      if (wiring.role !== 'secure')
        userKeys.warm(password).catch((err: unknown) => {
          // Not fatal: each login then derives its own key (and reports its own failure).
          ctx.log.warn({ err }, 'Kerberos key table could not be derived at start');
        });
      // In a fleet the auth role answers logins and the secure role registers stations; the
      // Kerberos key they share is the data folder's (give every process the same one).
      if (wiring.role !== 'secure')
        server.register(
          TicketGrantingProtocol,
          ticketGrantingHandlers({
            store,
            authority,
            passwordFor: () => password,
            secureUrl: wiring.secureUrl ?? secureUrl,
            userKeys,
          }),
        );
      if (wiring.role !== 'auth')
        server.register(
          SecureConnectionProtocol,
          secureConnectionHandlers({
            ...(wiring.connectionIdOf === undefined ? {} : { connectionIdOf: wiring.connectionIdOf }),
            ...(wiring.onRegister === undefined ? {} : { onRegister: wiring.onRegister }),
          }),
        );
    } else {
      registerHyperscape(secureUrl);
    }
  } catch (err) {
    for (const c of closers) await c();
    throw err;
  }
  return {
    endpoints,
    secureUrl,
    close: async (graceMs?: number) => {
      for (const c of closers) await c(graceMs);
    },
  };
}
