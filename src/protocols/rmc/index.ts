/**
 * Rendez-Vous RMC (Ubisoft/Quazal remote method calls): HyperScape's string-named variant by
 * default, the classic packed variant for decoding, a server framework with typed handlers,
 * the built-in HyperScape protocols, and a client. See docs/rmc.md.
 */

import { protocolPageDir } from '../../core/admin/static.js';
import { UsageError } from '../../core/errors.js';
import { defineServer } from '../../core/options.js';
import type { ProtocolModule } from '../../core/protocol.js';
import { rmcAdmin } from './admin.js';
import { registerCommands } from './cli.js';
import { rmcCodec } from './codec.js';
import { loadPacks } from './ddl/pack.js';
import { registerPackProtocols } from './ddl/register.js';
import { type RmcFleetServer, startRmcFleet } from './fleet/start.js';
import { rmcOptions } from './options.js';
import { parseDatacenters, registerBuiltins, SessionRegistry } from './protocols/index.js';
import { prudpCodec } from './prudp/codec.js';
import { startRmcTransports } from './prudp/serve.js';
import { RmcServer } from './server.js';
import { MemoryStore } from './store.js';

export * from './client.js';
export * from './codec.js';
export * from './describe.js';
export * from './dispatcher.js';
export * from './errors.js';
export * from './messages.js';
export { RMC_OPTIONS, RMC_SERVE_OPTIONS, type RmcOptions, rmcOptions } from './options.js';
export * from './protocols/index.js';
export * from './prudp/index.js';
export * from './server.js';
export * from './signature.js';
export * from './store.js';
export * from './types.js';

/** `gamewire serve rmc`: its options typed once, every default filled. */
export const rmcServer = defineServer({
  summary: 'RMC server with LoginProtocol, CloudServersProtocol, SessionProtocol, ApexAntitoxicityProtocol',
  options: rmcOptions,
  async start(options, ctx) {
    // Packs are read and checked before anything listens: a bad one stops the start.
    const packs = options.protocols === undefined ? [] : loadPacks(options.protocols);
    const datacenters = options.datacenters ?? parseDatacenters(undefined);
    const variant = options.prudpProfile === 'classic' ? 'classic' : 'hyperscape';
    const server = new RmcServer({
      log: ctx.log,
      metrics: ctx.metrics,
      variant,
      maxFrameBytes: options.maxFrameBytes,
      idleTimeoutMs: options.idleTimeoutMs,
      frameTimeoutMs: options.frameTimeoutMs,
      maxConnections: options.maxConnections,
      maxConnectionsPerIp: options.maxConnectionsPerIp,
      maxBufferedBytes: options.maxBufferedBytes,
      maxBufferedBytesPerIp: options.maxBufferedBytesPerIp,
      maxQueuedBytes: options.maxQueuedBytes,
      maxInFlight: options.maxInFlight,
      framesPerTurn: options.framesPerTurn,
    });
    const { role } = options;
    // A fleet role without --redis was refused with the options (`requires`).
    const redisUrl = options.redis === '' ? undefined : options.redis;
    if (redisUrl !== undefined) {
      if (options.store !== undefined)
        throw new UsageError(
          'rmc: --rmc-store (the embedded account log) cannot be used with --redis: the fleet keeps its accounts in Redis',
        );
      const fleet = await startRmcFleet(server, options, ctx, {
        role,
        redisUrl,
        redisPrefix: options.redisPrefix,
        ...(options.nodeId === undefined ? {} : { nodeId: options.nodeId }),
        region: options.region,
        nodeTtlMs: options.heartbeatTtlMs,
        storeTimeoutMs: options.storeTimeoutMs,
        connectionIdBlock: options.connectionIdBlock,
        drain: options.drain,
        capacity: options.maxConnections,
        accounts: {
          maxAccounts: options.maxAccounts,
          maxLoginsPerAccount: options.maxLoginsPerAccount,
          registrationsPerIpPerHour: options.registrationsPerIpPerHour,
          registrationsPerHour: options.registrationsPerHour,
        },
        sessions: {
          maxSessionsPerIp: options.maxSessionsPerIp,
          maxSessionsPerAccount: options.maxSessionsPerAccount,
        },
        datacenters,
        ...(options.secureUrl === undefined ? {} : { secureUrl: options.secureUrl }),
      });
      registerPackProtocols(server, packs, ctx.log);
      return Object.assign(fleet, {
        admin: rmcAdmin({
          dispatcher: server.dispatcher,
          variant,
          listSessions: () => fleet.listSessions(),
          ...(role === 'auth' ? {} : { drain: () => fleet.drain() }),
        }),
      });
    }
    let draining = false;
    const store = new MemoryStore(options.store, {
      maxAccounts: options.maxAccounts,
      maxLoginsPerAccount: options.maxLoginsPerAccount,
    });
    const sessions = new SessionRegistry({
      maxSessionsPerIp: options.maxSessionsPerIp,
      maxSessionsPerAccount: options.maxSessionsPerAccount,
    });
    const registration = {
      perIpPerHour: options.registrationsPerIpPerHour,
      perHour: options.registrationsPerHour,
    };
    const { secureUrl } = options;
    // PRUDP and/or TCP per --rmc-transport; the profile picks the built-ins (see prudp/serve.ts).
    const listening = await startRmcTransports(server, options, ctx, store, (url) =>
      registerBuiltins(server, {
        store,
        datacenters,
        sessions,
        registration,
        secureUrl: secureUrl ?? url,
      }),
    );
    registerPackProtocols(server, packs, ctx.log);
    const alone: RmcFleetServer = {
      endpoints: listening.endpoints,
      role,
      node: 'local',
      // Alone there is no auth server to steer logins away; draining is only recorded.
      drain: async () => {
        draining = true;
        ctx.log.info({ draining }, 'rmc: draining (no fleet: logins still come here)');
      },
      listSessions: async () => sessions.listSessions(),
      loginSessions: async () => store.sessions(),
      players: () => store.sessions().length,
      close: async (graceMs?: number) => {
        await listening.close(graceMs);
        await store.close();
        admin.wire?.close();
      },
    };
    // Alone, draining steers nothing away: the dashboard's drain answers 409.
    const admin = rmcAdmin({
      dispatcher: server.dispatcher,
      variant,
      listSessions: () => sessions.listSessions(),
    });
    return Object.assign(alone, { admin });
  },
});

export const rmc: ProtocolModule = {
  name: 'rmc',
  summary: 'Rendez-Vous RMC (HyperScape string-named variant by default; nex-verbose and classic packed)',
  codecs: [rmcCodec, prudpCodec],
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  server: rmcServer,
  registerCommands,
  conform: async () => (await import('./conform/index.js')).rmcConform,
  load: async () => (await import('./load.js')).rmcLoad,
};
