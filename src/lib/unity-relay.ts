/** `gamewire/unity-relay`: Unity Relay client, relay server, allocation store and API, codecs. */
export type { LogFn, Logger } from '../core/logger.js';
export { StoreNotDurableError, StoreUnavailableError } from '../core/redis.js';
export type { Allocation, Region, Role, StoreOptions } from '../protocols/unity-relay/allocations.js';
export { AllocationStore } from '../protocols/unity-relay/allocations.js';
export type { AllocationJson, AllocationService, ApiApp, ApiOptions } from '../protocols/unity-relay/api.js';
export { buildApi } from '../protocols/unity-relay/api.js';
export type {
  ClientState,
  ConnectionType,
  RelayServerData,
  UnityRelayClientOptions,
} from '../protocols/unity-relay/client.js';
export { RelayApiClient, relayServerData, UnityRelayClient } from '../protocols/unity-relay/client.js';
export { decodeAll, unityRelayCodec } from '../protocols/unity-relay/codec.js';
export type {
  DataplaneChoice,
  UnityRelayInstance,
  UnityRelayOptions,
} from '../protocols/unity-relay/composition.js';
export { startUnityRelay } from '../protocols/unity-relay/composition.js';
export {
  ApiError,
  NativeDataplaneError,
  RelayApiError,
  RelayClientError,
  StoreFullError,
} from '../protocols/unity-relay/errors.js';
export type {
  UnityRelayAllocatorInstance,
  UnityRelayAllocatorOptions,
} from '../protocols/unity-relay/fleet/allocator.js';
export { startUnityRelayAllocator } from '../protocols/unity-relay/fleet/allocator.js';
export type { FleetNodeView } from '../protocols/unity-relay/fleet/view.js';
export type { RelayMessage } from '../protocols/unity-relay/messages.js';
export {
  bindHmac,
  decodeMessage,
  encodeMessage,
  MessageType,
  RelayErrorCode,
  RelayMessages,
} from '../protocols/unity-relay/messages.js';
export type { NativeDataplaneStats } from '../protocols/unity-relay/native-dataplane.js';
export {
  DEFAULT_API_PORT,
  DEFAULT_DTLS_PORT,
  DEFAULT_RELAY_PORT,
  DEFAULT_WS_PORT,
  DEFAULT_WSS_PORT,
} from '../protocols/unity-relay/options.js';
export type { RelayOptions } from '../protocols/unity-relay/relay.js';
export { RelayServer } from '../protocols/unity-relay/relay.js';
export { unityRelayServer } from '../protocols/unity-relay/server.js';
/** The DTLS transport's error (thrown by the relay's DTLS endpoint and by `gamewire/dtls`). */
export { DtlsError } from '../transports/dtls/errors.js';
