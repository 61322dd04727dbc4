/**
 * What a message handler may use of the server: its options, instances, counters and the send
 * path. Handlers see only this interface, so they can be read (and tested) without the transport,
 * admission and reassembly machinery behind it.
 */
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { WireWriter } from '../../wire/index.js';
import type { Authenticator } from './auth.js';
import type { Priority } from './constants.js';
import type { Instance } from './instances.js';
import type { ServerMessage } from './messages.js';
import type { ResolvedOptions } from './options.js';
import type { RelayClient } from './session.js';
import type { InstanceAliases } from './udp-admission.js';

export interface RelayContext {
  readonly options: ResolvedOptions;
  readonly log: Logger;
  readonly metrics: ProtocolMetrics;
  readonly instances: ReadonlyMap<number, Instance>;
  /** No master server: any token is accepted and the Handshake says IsOffline. */
  readonly offline: boolean;
  readonly authenticate: Authenticator;
  /** Scratch writer for the transform fan-out (hot path); valid until the next use. */
  readonly fanWriter: WireWriter;
  /** Encodes one packet into a fresh buffer (safe to hand to several sockets). */
  encode(uid: number, message: ServerMessage): Buffer;
  send(client: RelayClient, uid: number, message: ServerMessage, priority: Priority): void;
  /** Tells the client why (unless it is half-open), then forgets it. */
  disconnect(client: RelayClient, reason: string, quitType: number): void;
  /** Forgets a client: its players leave, its link closes after flushing (links.ts). */
  dropClient(client: RelayClient, quitType: number, reason: string | null): void;
  /** The address cookie for this client's Handshake reply: only on a datagram link, when enabled; else null. */
  addressCookie(client: RelayClient): Uint8Array | null;
  /** Checks a cookie sent back by a datagram source; a valid one proves its address (and admits it). */
  proveAddress(client: RelayClient, cookie: Uint8Array): boolean;
  /**
   * The instance aliases a Sessions reply lists to this client (made on first use): only for an
   * unproven (datagram) client, while the relay has few enough public instances; otherwise undefined.
   */
  instanceAliases(client: RelayClient): InstanceAliases | undefined;
  /**
   * The first time a client that holds aliases names an instance by an id that is not real:
   * `correct` when it was its alias (its address is then proven), else a blind guess.
   */
  judgeAlias(client: RelayClient, correct: boolean): void;
}
