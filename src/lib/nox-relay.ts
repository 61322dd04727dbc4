/** `gamewire/nox-relay`: NoxVR Relay server, client and codecs. */
export { NoxRelayClient } from '../protocols/nox-relay/client.js';
export { decodePackets, encodePackets, noxRelayCodec } from '../protocols/nox-relay/codec.js';
export { NoxRelayClientError, NoxRelayConfigError } from '../protocols/nox-relay/errors.js';
export { clientMessages, serverMessages } from '../protocols/nox-relay/messages.js';
export type { NoxRelayOptions } from '../protocols/nox-relay/server.js';
export { NoxRelayServer } from '../protocols/nox-relay/server.js';
