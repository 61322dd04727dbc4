/** gamewire's public entry: the wire core and every protocol module. */

export type { ProtocolCodec, ProtocolModule } from './core/protocol.js';
export { protocols } from './protocols/registry.js';
export * as vcmpRpc from './protocols/vcmp-rpc/index.js';
export * as wire from './wire/index.js';
