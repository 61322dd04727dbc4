/**
 * The DTLS endpoint of the relay (`connectionType: "dtls"`): the project's DTLS 1.2 PSK server
 * (src/transports/dtls) on its own UDP port, wired to the relay the way Unity Transport uses it:
 * - PSK identity = the allocation id, as its 16 raw bytes (what UTP sends) or its GUID string (what
 *   Unity's docs say); PSK = that allocation's 64-byte key. Unknown or expired: alert 115. A
 *   relay node of a fleet (which learns an allocation at its first BIND, sent after the handshake)
 *   derives the key of an id it has not seen from the fleet secret instead.
 * - Each association is a `DtlsLink` that may speak only for the allocation named by its identity
 *   (BIND, PING, RELAY… for another allocation id are dropped).
 * - One relay message per record, one record per datagram, both ways (the DTLS module's `send`).
 * - The association lives as long as the binding: it is closed when the binding expires, is
 *   CLOSEd, or moves elsewhere; a new association from the same address and port (UTP's
 *   reconnection probe after silence) takes over the binding.
 * - On the native data plane the DTLS port is the native socket's: the server is fed from it, and
 *   hands the record layer of its associations to it (native-dtls.ts), which forwards RELAYs
 *   between bound, linked peers without entering JavaScript.
 */

import { addressKey, CloseReason, type Connection, ConnectionTable } from '../../core/connection.js';
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { type DtlsAssociation, DtlsServer, type DtlsServerOptions } from '../../transports/dtls/index.js';
import { type AllocationStore, bytesFromGuid, guidFromBytes } from './allocations.js';
import type { NativeBindingTarget, RelayLink } from './links.js';
import type { NativeDtlsRecords } from './native-dtls.js';
import type { RelayServer } from './relay.js';

/** The allocation id a PSK identity names: 16 raw bytes, or a 36-character GUID string. */
export function allocationIdFromIdentity(identity: Buffer): Buffer | undefined {
  if (identity.length === 16) return identity;
  if (identity.length === 36) return bytesFromGuid(identity.toString('latin1'));
  return undefined;
}

/**
 * The connection seam's close reason for a DTLS server's (kebab-case) one: the shared names
 * where there is one, the DTLS server's own otherwise.
 */
export function dtlsCloseReason(reason: string): string {
  switch (reason) {
    case 'close-notify':
      return CloseReason.PeerClosed;
    case 'idle':
      return CloseReason.IdleTimeout;
    case 'server-close':
      return CloseReason.ServerClosing;
    case 'local-close':
      return CloseReason.ClosedByServer;
    default:
      return reason.replaceAll('-', '_');
  }
}

/**
 * One DTLS association: the client's "address" on the relay, bound to one allocation, and a
 * connection of the seam (messages: application-data records; bytes: their plaintext). On the
 * native data plane, RELAYs forwarded in C between bound peers do not pass through it and are
 * not in its counters.
 */
export class DtlsLink implements RelayLink, Connection {
  readonly transport = 'dtls' as const;
  readonly identity: Buffer;
  readonly maxMessage: number;
  readonly association: DtlsAssociation;
  readonly addressKey: string;
  closed = false;
  /** Why the relay closed it (the first reason); undefined: the DTLS server's reason stands. */
  reason: string | undefined = undefined;
  bytesIn = 0;
  bytesOut = 0;
  messagesIn = 0;
  messagesOut = 0;

  constructor(association: DtlsAssociation, allocationId: Buffer, maxMessage: number) {
    this.association = association;
    this.identity = allocationId;
    this.maxMessage = maxMessage;
    this.addressKey = addressKey(association.remoteAddress);
  }

  get remoteAddress(): string {
    return this.association.remoteAddress;
  }

  get remotePort(): number {
    return this.association.remotePort;
  }

  get address(): string {
    return this.association.remoteAddress;
  }

  get port(): number {
    return this.association.remotePort;
  }

  get open(): boolean {
    return !this.closed;
  }

  send(msg: Buffer): void {
    if (this.closed) return;
    this.messagesOut++;
    this.bytesOut += msg.length;
    this.association.send(msg);
  }

  /** An association is its own source: one per 5-tuple, authenticated. */
  carries(src: RelayLink): boolean {
    return src === this;
  }

  linkForBind(): RelayLink {
    return this;
  }

  /** Counted on arrival (every record), not here. */
  accepted(): void {}

  /** Forwarded natively while the association is held natively too (native-dtls.ts). */
  bindNative(plane: NativeBindingTarget, id: Buffer): boolean {
    return plane.bindDtls(id, this.association);
  }

  /** Whether a BIND ever named this association (until then it is closed after a deadline). */
  everBound = false;

  bound(): void {
    this.everBound = true;
  }

  /**
   * The binding ended: so does the association (its lifetime is the binding's), as `unbound`
   * whatever ended the binding (the reason its close has always carried).
   */
  unbound(): void {
    this.close('unbound');
  }

  /** Sends close_notify and forgets the association. */
  close(reason: string = CloseReason.ClosedByServer): void {
    if (this.closed) return;
    this.closed = true;
    this.reason ??= reason;
    this.association.close();
  }
}

export interface DtlsEndpointOptions extends Omit<DtlsServerOptions, 'pskFor'> {
  host: string;
  port: number;
  /** The native data plane's DTLS socket and record layer; the endpoint then binds no socket itself. */
  native?: NativeDtlsRecords | undefined;
  /**
   * An association that has not bound an allocation after this long is closed (`never_bound`),
   * as a WebSocket is. Without it, anyone holding one allocation's key could open associations
   * from many ports, keep them alive, and fill `maxAssociations` for everyone. Default 15 s.
   */
  bindTimeoutMs?: number;
}

/** Default `bindTimeoutMs` of the DTLS endpoint (the WebSocket one's too). */
export const DTLS_BIND_TIMEOUT_MS = 15_000;

export interface DtlsEndpoint {
  readonly port: number;
  readonly server: DtlsServer;
  /** Open associations. */
  readonly links: ReadonlySet<DtlsLink>;
  /** The connection seam's table of the associations (diagnostics; the DTLS server caps them). */
  readonly table: ConnectionTable<DtlsLink>;
  close(): Promise<void>;
}

/** Starts the DTLS endpoint feeding `relay`. Resolves once it listens. */
export async function startDtlsEndpoint(
  relay: RelayServer,
  store: AllocationStore,
  metrics: ProtocolMetrics,
  log: Logger,
  options: DtlsEndpointOptions,
): Promise<DtlsEndpoint> {
  const { host, port, native, bindTimeoutMs = DTLS_BIND_TIMEOUT_MS, ...dtlsOptions } = options;
  const server = new DtlsServer({
    ...dtlsOptions,
    pskFor(identity: Buffer): Buffer | undefined {
      const id = allocationIdFromIdentity(identity);
      if (id === undefined) return undefined;
      const a = store.find(id, 0);
      if (a !== undefined) return a.state === 'expired' ? undefined : a.key;
      // A relay node learns an allocation at its first BIND, which a DTLS client sends after the
      // handshake: the key of an id it has not seen comes from the fleet secret, as for a UDP
      // BIND. Only a client given that key by an allocator completes the handshake; the BIND
      // that follows is then checked (connection data, node, deadline) like any other.
      return store.adoptFromConnectionData ? store.credentials.keyFor(id) : undefined;
    },
  });
  const byAssociation = new WeakMap<DtlsAssociation, DtlsLink>();
  const links = new Set<DtlsLink>();
  // The DTLS server applies the caps (associations in all, handshakes per address) before an
  // association exists; the table holds the associations for the seam's events and counts.
  const table = new ConnectionTable<DtlsLink>({
    protocol: metrics.protocol,
    transport: 'dtls',
    maxConnections: Number.POSITIVE_INFINITY,
    maxConnectionsPerIp: 0,
  });
  server.on('association', (assoc) => {
    const id = allocationIdFromIdentity(assoc.identity);
    const a = id === undefined ? undefined : store.find(id, 0);
    // Unknown ids are accepted only by a relay node (pskFor derived their key): the BIND that
    // follows adopts the allocation.
    if (id === undefined || (a === undefined && !store.adoptFromConnectionData)) {
      assoc.close();
      return;
    }
    const link = new DtlsLink(assoc, Buffer.from(id), relay.maxMessageToDtls);
    byAssociation.set(assoc, link);
    links.add(link);
    table.open(link);
    metrics.count('dtls_associations');
    if (bindTimeoutMs > 0) {
      const deadline = setTimeout(() => {
        if (link.everBound || link.closed) return;
        metrics.close('dtls_never_bound');
        link.close('never_bound');
      }, bindTimeoutMs);
      deadline.unref();
    }
    log.debug(
      { remote: `${link.address}:${link.port}`, allocation: a?.guid ?? guidFromBytes(id) },
      'dtls association',
    );
    if (a === undefined) return;
    // A new session from the address and port the allocation is bound through (UTP's probe after
    // silence, RFC 6347 §4.2.8): the binding moves to it, no re-BIND needed.
    const old = a.link;
    if (
      a.state === 'bound' &&
      old instanceof DtlsLink &&
      old !== link &&
      old.address === link.address &&
      old.port === link.port
    ) {
      a.link = link;
      link.bound();
      old.unbound();
      store.observer?.bound(a); // the native table follows the binding to the new association
    }
  });
  server.on('message', (assoc, plaintext) => {
    const link = byAssociation.get(assoc);
    if (link === undefined) {
      metrics.drop('dtls_unknown_association');
      return;
    }
    link.messagesIn++;
    link.bytesIn += plaintext.length;
    relay.handleFrom(plaintext, link);
  });
  server.on('close', (assoc, reason) => {
    const link = byAssociation.get(assoc);
    if (link !== undefined) {
      link.closed = true;
      links.delete(link);
      table.release(link, link.reason ?? dtlsCloseReason(reason));
    }
    metrics.close(`dtls_${reason}`);
  });
  server.on('drop', (reason) => metrics.drop(`dtls_${reason}`));
  let boundPort: number;
  if (native !== undefined) {
    native.serve(server);
    boundPort = native.socket.dtlsPort!;
  } else {
    boundPort = (await server.listen(port, host)).port;
  }
  return {
    port: boundPort,
    server,
    links,
    table,
    close: () => {
      table.closing();
      return server.close();
    },
  };
}
