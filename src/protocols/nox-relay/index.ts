/**
 * NoxVR Relay v1 (`nox-relay`): codec, server (TCP+UDP on one port), client and bot swarm.
 * See docs/nox-relay.md.
 */

import { protocolPageDir } from '../../core/admin/static.js';
import { defineServer } from '../../core/options.js';
import type { ProtocolModule } from '../../core/protocol.js';
import { noxRelayAdmin } from './admin.js';
import { registerCommands } from './cli.js';
import { noxRelayCodec } from './codec.js';
import { noxRelayOptions } from './options.js';
import { NoxRelayServer } from './server.js';

export { NoxRelayClient } from './client.js';
export { NoxRelayClientError, NoxRelayConfigError } from './errors.js';
export {
  loadInstances,
  NOX_RELAY_OPTIONS,
  type NoxRelayOptions,
  noxRelayOptions,
  type ResolvedOptions as NoxRelayResolvedOptions,
} from './options.js';
export { CloseReason, DropReason } from './reasons.js';
export { NoxRelayServer } from './server.js';

/** `gamewire serve nox-relay`: its options declared once (options.ts), every default filled. */
export const noxRelayServer = defineServer({
  summary: 'NoxVR Relay v1: instances, membership and transform fan-out over TCP and UDP on one port',
  options: noxRelayOptions,
  async start(options, ctx) {
    // The server resolves them again through the same declaration: a value given to start()
    // directly is checked there (NoxRelayConfigError).
    const relay = new NoxRelayServer({ ...options, log: ctx.log, metrics: ctx.metrics });
    const endpoints = await relay.start();
    ctx.log.info(
      { port: relay.port, instances: relay.instances.size, offline: relay.offline },
      'nox-relay listening',
    );
    const admin = noxRelayAdmin(relay);
    return { endpoints, admin, close: () => relay.close().finally(() => admin.wire?.close()) };
  },
});

export const noxRelay: ProtocolModule = {
  name: 'nox-relay',
  summary: 'NoxVR Relay v1 (social VR instances; TCP+UDP)',
  codecs: [noxRelayCodec],
  server: noxRelayServer,
  registerCommands,
  conform: async () => (await import('./conform/index.js')).noxRelayConform,
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  load: async () => (await import('./load.js')).noxRelayLoad,
};
