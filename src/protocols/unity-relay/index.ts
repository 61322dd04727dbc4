/**
 * Unity Relay (`unity-relay`): a self-hosted relay that stock Unity Transport clients bind to,
 * its allocation API, a client library and a chat demo, over UDP, DTLS, WebSocket and secure
 * WebSocket. See docs/unity-relay.md.
 */

import { protocolPageDir } from '../../core/admin/static.js';
import type { ProtocolModule } from '../../core/protocol.js';
import { registerCommands } from './cli.js';
import { unityRelayCodec } from './codec.js';
import { unityRelayServer } from './server.js';

export * from './allocations.js';
export * from './api.js';
export * from './client.js';
export * from './codec.js';
export * from './composition.js';
export * from './dtls.js';
export * from './errors.js';
export * from './fleet/allocation-service.js';
export * from './fleet/allocator.js';
export * from './fleet/presence.js';
export * from './fleet/view.js';
export * from './limits.js';
export * from './links.js';
export * from './messages.js';
export * from './options.js';
export * from './relay.js';
export * from './server.js';
export * from './websocket.js';

export const unityRelay: ProtocolModule = {
  name: 'unity-relay',
  summary: 'Unity Relay: relay server for stock Unity Transport clients, allocation API, client',
  codecs: [unityRelayCodec],
  server: unityRelayServer,
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  registerCommands,
  conform: async () => (await import('./conform/index.js')).unityRelayConform,
  load: async () => (await import('./load.js')).unityRelayLoad,
};
