/** `gamewire/rmc/codec`: RMC packets as bytes <-> values and JSON; loads no server or client code. */
export { decodeStream, rmcCodec } from '../protocols/rmc/codec.js';
export type { RmcVariant } from '../protocols/rmc/messages.js';
export { packetCodec, RMC_VARIANTS } from '../protocols/rmc/messages.js';
export { PrudpError } from '../protocols/rmc/prudp/packet.js';
