/** gamewire's public entry: the wire core and every protocol module. */

export type { ProtocolCodec, ProtocolModule } from './core/protocol.js';
export * as js5 from './protocols/js5/index.js';
export * as noxRelay from './protocols/nox-relay/index.js';
export { protocols } from './protocols/registry.js';
export * as rmc from './protocols/rmc/index.js';
export * as unityRelay from './protocols/unity-relay/index.js';
export * as vcmpRpc from './protocols/vcmp-rpc/index.js';
export * as wire from './wire/index.js';
