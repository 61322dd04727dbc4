/** Connection-level requests: Handshake, Latency, Authentification, Sessions. */

import type { AuthOutcome } from '../auth.js';
import {
  AuthFlags,
  AuthResult,
  HandshakeFlags,
  InstanceFlags,
  PROTOCOL_VERSION,
  Priority,
  QuitType,
} from '../constants.js';
import type { ClientMessage, ServerMessage } from '../messages.js';
import type { NoxRelayServer } from '../server.js';
import { ipv4Bytes, type RelayClient } from '../session.js';

type Msg<T extends ClientMessage['type']> = Extract<ClientMessage, { type: T }>;

/** Seconds for the Handshake's u16 fields (at least 1, so a client never sees 0). */
function seconds(ms: number): number {
  return Math.min(0xffff, Math.max(1, Math.ceil(ms / 1000)));
}

/** The Handshake reply for `client` (its length does not depend on the client). */
export function handshakeReply(server: NoxRelayServer, client: RelayClient): ServerMessage {
  const o = server.options;
  const offline = server.offline;
  return {
    type: 'Handshake',
    protocol: PROTOCOL_VERSION,
    clientId: client.id,
    clientIp: ipv4Bytes(client.ip),
    clientPort: client.port,
    flags: offline ? HandshakeFlags.IsOffline : HandshakeFlags.None,
    ...(offline ? {} : { masterAddr: o.master! }),
    maxPacketSize: o.maxPacketSize,
    connectionTimeout: seconds(o.connectionTimeoutMs),
    keepAliveInterval: seconds(o.keepAliveIntervalMs),
    segmentationTimeout: seconds(o.segmentationTimeoutMs),
  };
}

export function handleHandshake(
  server: NoxRelayServer,
  client: RelayClient,
  uid: number,
  m: Msg<'Handshake'>,
): void {
  if (m.protocol !== PROTOCOL_VERSION) {
    // Spec §7.2: tell the client why, then close. Over UDP only when the reason fits in the
    // datagram that asked (anti-amplification, docs/nox-relay.md); otherwise silently.
    server.metrics.close('bad_protocol');
    const reason = `Incompatible protocol version (${m.protocol} != ${PROTOCOL_VERSION}).`;
    if (client.transport === 'udp') {
      const bytes = server.encode(uid, { type: 'Disconnect', reason });
      if (bytes.length <= client.datagramBytes * server.options.udpReplyFactor)
        client.send(bytes, Priority.Critical);
      else server.metrics.drop('udp_amplification');
      server.dropClient(client, QuitType.ConfigurationError, null);
      return;
    }
    server.disconnect(client, reason, QuitType.ConfigurationError);
    return;
  }
  const bytes = server.encode(uid, handshakeReply(server, client));
  if (client.transport === 'udp' && bytes.length > client.datagramBytes * server.options.udpReplyFactor) {
    // Never answer an (unproven, spoofable) UDP source with much more than it sent.
    server.metrics.drop('udp_amplification');
    return;
  }
  client.handshaked = true;
  client.engine = m.engine;
  client.platform = m.platform;
  client.send(bytes, Priority.Critical);
}

/** Echoes the client's 8 timestamp bytes unchanged (as a bigint) and adds the server's clock. */
export function handleLatency(
  server: NoxRelayServer,
  client: RelayClient,
  uid: number,
  m: Msg<'Latency'>,
): void {
  server.send(
    client,
    uid,
    { type: 'Latency', clientTimestamp: m.timestamp, serverTimestamp: BigInt(Date.now()) },
    Priority.High,
  );
}

export function handleAuthentification(
  server: NoxRelayServer,
  client: RelayClient,
  uid: number,
  m: Msg<'Authentification'>,
): void {
  if (client.auth !== 'none') {
    server.metrics.drop('auth_repeated');
    return;
  }
  if ((m.flags & AuthFlags.UseGuest) !== 0) {
    server.send(
      client,
      uid,
      {
        type: 'Authentification',
        result: AuthResult.Unknown,
        reason: 'This server does not support unauthenticated access.',
      },
      Priority.High,
    );
    return;
  }
  if (m.accessToken === '') {
    server.send(
      client,
      uid,
      { type: 'Authentification', result: AuthResult.InvalidToken, reason: 'Access token is missing.' },
      Priority.High,
    );
    return;
  }
  client.auth = 'pending';
  const tokenType = (m.flags & AuthFlags.UseIntegrity) !== 0 ? 'integrity' : 'bearer';
  let attempt: Promise<AuthOutcome>;
  try {
    attempt = server.authenticate({ token: m.accessToken, tokenType, ip: client.ip, clientId: client.id });
  } catch (err) {
    attempt = Promise.reject(err);
  }
  attempt
    .catch((err: Error) => ({ result: AuthResult.MasterError, reason: String(err?.message ?? err) }) as const)
    .then((outcome) => {
      if (client.closed) return;
      if (outcome.result === AuthResult.Success) {
        // Encode first: a reply that cannot be written (a huge name, say) must not leave the
        // client half-authenticated.
        const bytes = server.encode(uid, {
          type: 'Authentification',
          result: AuthResult.Success,
          userId: outcome.userId,
          serverAddress: outcome.serverAddress,
          displayName: outcome.displayName,
        });
        client.auth = 'done';
        client.userId = outcome.userId;
        client.userServer = outcome.serverAddress;
        client.displayName = outcome.displayName;
        client.userFlags = outcome.flags ?? 0;
        server.metrics.count('authenticated');
        client.send(bytes, Priority.High);
        return;
      }
      const bytes =
        outcome.result === AuthResult.Blacklisted
          ? server.encode(uid, {
              type: 'Authentification',
              result: outcome.result,
              expireAt: toDateTime(outcome.expireAt),
              reason: outcome.reason,
            })
          : server.encode(uid, { type: 'Authentification', result: outcome.result, reason: outcome.reason });
      // A failed attempt may be retried with another token.
      client.auth = 'none';
      server.metrics.count('auth_failed');
      client.send(bytes, Priority.High);
    })
    .catch((err: unknown) => {
      // Whatever went wrong (a bad outcome from the authenticator, an encoding error), the
      // process must not see an unhandled rejection and the client must not stay 'pending'.
      server.metrics.count('auth_error');
      server.log.warn({ err, client: client.id }, 'authentification failed unexpectedly');
      if (client.closed) return;
      client.auth = 'none';
      client.userId = 0;
      client.userServer = '';
      client.displayName = '';
      client.userFlags = 0;
      try {
        server.send(
          client,
          uid,
          {
            type: 'Authentification',
            result: AuthResult.MasterError,
            reason: 'Authentification failed on the server.',
          },
          Priority.High,
        );
      } catch {
        server.disconnect(client, 'Authentification failed.', QuitType.UnknownError);
      }
    });
}

/** A millisecond timestamp as the wire's u64: truncated, clamped to 0..2^53-1, 0 if not finite. */
function toDateTime(ms: number): bigint {
  if (!Number.isFinite(ms) || ms <= 0) return 0n;
  return BigInt(Math.min(Number.MAX_SAFE_INTEGER, Math.trunc(ms)));
}

/** 13 bytes per listed instance; count + page + total around them. */
export function sessionsPerPage(maxPacketSize: number): number {
  return Math.max(1, Math.min(255, Math.floor((maxPacketSize - 5 - 3) / 13)));
}

/** Public instances only (spec §7.5), paged to fit one packet. */
export function handleSessions(
  server: NoxRelayServer,
  client: RelayClient,
  uid: number,
  m: Msg<'Sessions'>,
): void {
  const listed = [...server.instances.values()]
    .filter((i) => (i.flags & InstanceFlags.IsPublic) !== 0)
    .sort((a, b) => a.id - b.id);
  const per = sessionsPerPage(server.options.maxPacketSize);
  const total = Math.min(255, Math.ceil(listed.length / per));
  const page = m.page < total ? listed.slice(m.page * per, (m.page + 1) * per) : [];
  server.send(
    client,
    uid,
    {
      type: 'Sessions',
      instances: page.map((i) => ({
        flags: i.flags >>> 0,
        internalId: i.id,
        masterId: i.masterId,
        currentPlayers: Math.min(0xffff, i.players.size),
        capacity: i.capacity,
      })),
      currentPage: m.page,
      totalPages: total,
    },
    Priority.Normal,
  );
}
