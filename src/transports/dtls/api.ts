/** The public shapes of the DTLS module (see docs/dtls.md). */
import type dgram from 'node:dgram';

export interface DtlsServerOptions {
  /** Returns the PSK for an identity (raw bytes as sent by the client), or undefined -> alert 115. */
  pskFor(identity: Buffer): Buffer | undefined;
  /** Suites the server accepts, in its order of preference (default DEFAULT_CIPHER_SUITES). */
  cipherSuites?: number[];
  /** Handshakes in progress (past the cookie), in all. Default 1024. */
  maxHandshakes?: number;
  /** Handshakes in progress from one address: an IPv4 address, or one IPv6 /64 (`addressKey`). Default 64. */
  maxHandshakesPerIp?: number;
  /** A handshake not finished this long after its verified ClientHello is dropped. Default 61_000. */
  handshakeTimeoutMs?: number;
  /**
   * A ClientHello from the address of an established association that received a valid record
   * less than this long ago is a reconnection probe and is dropped without any reply. Default 5000.
   */
  probeQuietMs?: number;
  /** The cookie secret changes this often; cookies of the previous secret stay valid. Default 60_000. */
  cookieSecretRotationMs?: number;
  /** Largest application-data plaintext accepted or sent in one record. Default 1536 (1472 + slack). */
  maxRecordPlaintext?: number;
  /** Established associations, in all. Further handshakes are dropped. Default 65_536. */
  maxAssociations?: number;
  /** An association that received no valid record for this long is forgotten (0 = never). Default 120_000. */
  associationIdleTimeoutMs?: number;
  /** Largest handshake message accepted (reassembly buffer bound). Default 4096. */
  maxHandshakeMessageBytes?: number;
  /**
   * Receive buffer asked for the socket `listen` binds (the kernel caps it at net.core.rmem_max).
   * The default 4 MiB, as the relay's UDP socket, holds a few hundred ms of a busy relay's records
   * while the event loop is elsewhere; the system default (about 200 KB) overflowed. Default 4 MiB.
   */
  recvBufferBytes?: number;
}

export interface DtlsAssociation {
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** PSK identity, as the client sent it. */
  readonly identity: Buffer;
  readonly cipherSuite: number;
  readonly extendedMasterSecret: boolean;
  /** Encrypts `plaintext` as ONE record in ONE datagram. Returns false if closed (or too large). */
  send(plaintext: Buffer): boolean;
  /** Sends close_notify and forgets the association. */
  close(): void;
  /** ms timestamp (Date.now()) of the last valid record: what the probe rule looks at. */
  lastReceivedAt: number;
}

export interface DtlsServerEvents {
  /** Handshake completed (the client's Finished verified). */
  association(a: DtlsAssociation): void;
  /** One application_data record. */
  message(a: DtlsAssociation, plaintext: Buffer): void;
  /** The association is gone: `close_notify`, a fatal alert, replaced, idle, local close, server close. */
  close(a: DtlsAssociation, reason: string): void;
  /** A datagram, record or handshake message was rejected; `reason` is a stable kebab-case word. */
  drop(reason: string, remote: { address: string; port: number }): void;
}

/** The event map form of DtlsServerEvents, for Node's typed EventEmitter. */
export type DtlsServerEventMap = { [K in keyof DtlsServerEvents]: Parameters<DtlsServerEvents[K]> };

export interface DtlsClientOptions {
  host: string;
  port: number;
  identity: Buffer;
  psk: Buffer;
  /** Suites offered, in order (default DEFAULT_CIPHER_SUITES). */
  cipherSuites?: number[];
  /** The whole handshake must finish within this time. Default 10_000. */
  timeoutMs?: number;
  /** Offer the extended master secret (RFC 7627). Default true. */
  extendedMasterSecret?: boolean;
  /** First retransmission delay; it doubles up to 60 s (RFC 6347 §4.2.4.1). Default 1000. */
  retransmitMs?: number;
  /** Largest application-data plaintext accepted or sent in one record. Default 1536. */
  maxRecordPlaintext?: number;
  /** Local address to send from (e.g. `127.0.0.2`). Default: chosen by the system. */
  localAddress?: string;
}

/** What `DtlsClient.detachRecordLayer()` hands over. */
export interface DtlsClientRecordLayer {
  /** The client's UDP socket, connected to the server. */
  socket: dgram.Socket;
  cipherSuite: number;
  epoch: number;
  /** client_write key and IV (what the client seals with). */
  writeKey: Buffer;
  writeIv: Buffer;
  /** server_write key and IV (what the client opens with). */
  readKey: Buffer;
  readIv: Buffer;
  /** Next sequence number to send. */
  writeSeq: number;
}

export interface DtlsClientEventMap {
  message: [plaintext: Buffer];
  close: [reason: string];
}

/** Snapshot of a server's state and counters. */
export interface DtlsServerStats {
  handshakesInProgress: number;
  associations: number;
  handshakesCompleted: number;
  /** Drops per reason since the server started. */
  drops: Record<string, number>;
}
