/** `gamewire/nox-relay/codec`: NoxVR Relay packets; loads no server or client code. */
export { decodePackets, encodePackets, noxRelayCodec } from '../protocols/nox-relay/codec.js';
export { clientMessages, serverMessages } from '../protocols/nox-relay/messages.js';
