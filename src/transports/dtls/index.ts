/**
 * DTLS 1.2 with pre-shared keys: a server (DtlsServer) and a client (DtlsClient) of the subset
 * Unity's relay transport needs. Independent of any game protocol; see docs/dtls.md.
 */
export type {
  DtlsAssociation,
  DtlsClientEventMap,
  DtlsClientOptions,
  DtlsClientRecordLayer,
  DtlsServerEventMap,
  DtlsServerEvents,
  DtlsServerOptions,
  DtlsServerStats,
} from './api.js';
export { DtlsClient } from './client.js';
export { AlertDescription } from './constants.js';
export { DtlsError, type DtlsErrorCode } from './errors.js';
export type {
  DtlsRecordOffload,
  DtlsRecordProgress,
  DtlsRecordState,
  OffloadSendResult,
  ReplaySnapshot,
} from './offload.js';
export { DTLS_SERVER_DEFAULTS, DtlsServer } from './server.js';
export { CIPHER_SUITES, type CipherSuite, DEFAULT_CIPHER_SUITES, recordOverhead } from './suites.js';
