/** `gamewire/dtls`: DTLS 1.2 with pre-shared keys, server and client (docs/dtls.md). */
export type {
  DtlsAssociation,
  DtlsClientEventMap,
  DtlsClientOptions,
  DtlsServerEventMap,
  DtlsServerEvents,
  DtlsServerOptions,
  DtlsServerStats,
} from '../transports/dtls/api.js';
export { DtlsClient } from '../transports/dtls/client.js';
export { AlertDescription } from '../transports/dtls/constants.js';
export { DtlsError, type DtlsErrorCode } from '../transports/dtls/errors.js';
export { DTLS_SERVER_DEFAULTS, DtlsServer } from '../transports/dtls/server.js';
export { CIPHER_SUITES, type CipherSuite, DEFAULT_CIPHER_SUITES } from '../transports/dtls/suites.js';
