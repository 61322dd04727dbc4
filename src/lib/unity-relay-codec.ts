/** `gamewire/unity-relay/codec`: Unity Relay messages; loads no server or client code. */
export { decodeAll, unityRelayCodec } from '../protocols/unity-relay/codec.js';
export type { RelayMessage } from '../protocols/unity-relay/messages.js';
export {
  bindHmac,
  decodeMessage,
  encodeMessage,
  MessageType,
  RelayErrorCode,
  RelayMessages,
} from '../protocols/unity-relay/messages.js';
