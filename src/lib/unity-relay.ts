/** `gamewire/unity-relay`: Unity Relay client, relay server, allocation store and API, codecs. */
export { AllocationStore } from '../protocols/unity-relay/allocations.js';
export { buildApi } from '../protocols/unity-relay/api.js';
export type { UnityRelayClientOptions } from '../protocols/unity-relay/client.js';
export {
  RelayApiClient,
  RelayApiError,
  relayServerData,
  UnityRelayClient,
} from '../protocols/unity-relay/client.js';
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
export { RelayServer } from '../protocols/unity-relay/relay.js';
export type { UnityRelayOptions } from '../protocols/unity-relay/server.js';
export { DEFAULT_API_PORT, DEFAULT_RELAY_PORT, unityRelayServer } from '../protocols/unity-relay/server.js';
