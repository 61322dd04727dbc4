/** Connection-level requests: Handshake, Latency, Authentification, Sessions. */

import { TokenBucket } from '../../../core/token-bucket.js';
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
import type { RelayContext } from '../context.js';
import type { ClientMessage, ServerMessage } from '../messages.js';
import { CloseReason, Counter, DropReason } from '../reasons.js';
import { ipv4Bytes, type RelayClient } from '../session.js';

type Msg<T extends ClientMessage['type']> = Extract<ClientMessage, { type: T }>;

/** Handshakes answered per session at once (the first, the cookie's, a retry)… */
export const HANDSHAKE_BURST = 3;
/** …and then per second: a client resending after lost replies is always answered in the end. */
export const HANDSHAKES_PER_SECOND = 1;

/** Seconds for the Handshake's u16 fields (at least 1, so a client never sees 0). */
function seconds(ms: number): number {
  return Math.min(0xffff, Math.max(1, Math.ceil(ms / 1000)));
}

/**
 * The Handshake reply for `client`. Its length does not depend on the client, except for the
 * address cookie (8 bytes) that replies on a datagram link carry.
 */
export function handshakeReply(
  ctx: RelayContext,
  client: Pick<RelayClient, 'id' | 'ip' | 'port'>,
  addressCookie: Uint8Array | null = null,
): ServerMessage {
  const o = ctx.options;
  const offline = ctx.offline;
  return {
    type: 'Handshake',
    protocol: PROTOCOL_VERSION,
    clientId: client.id,
    clientIp: ipv4Bytes(client.ip),
    clientPort: client.port,
    flags: offline ? HandshakeFlags.IsOffline : HandshakeFlags.None,
    ...(offline ? {} : { masterAddr: o.master! }),
    maxPacketSize: o.maxPacketBytes,
    connectionTimeout: seconds(o.connectionTimeoutMs),
    keepAliveInterval: seconds(o.keepAliveIntervalMs),
    segmentationTimeout: seconds(o.segmentationTimeoutMs),
    addressCookie,
  };
}

export function handleHandshake(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'Handshake'>,
): void {
  if (m.protocol !== PROTOCOL_VERSION) {
    // Spec §7.2: tell the client why, in reply to its Handshake (the request's uid), then close;
    // a half-open session too. An unproven source hears why only within its anti-amplification
    // budget (the send path checks it).
    ctx.metrics.close(CloseReason.BadProtocol);
    const reason = `Incompatible protocol version (${m.protocol} != ${PROTOCOL_VERSION}).`;
    client.send(ctx.encode(uid, { type: 'Disconnect', reason }), Priority.Critical);
    ctx.dropClient(client, QuitType.ConfigurationError, null);
    return;
  }
  // Only a datagram source starts unproven (a stream's connection proved its address).
  if (m.addressCookie !== null && !client.addressProven) ctx.proveAddress(client, m.addressCookie);
  const cookie = ctx.addressCookie(client);
  let bytes = ctx.encode(uid, handshakeReply(ctx, client, cookie));
  // An unproven source gets the cookie only within its budget; the bare reply may still fit.
  if (cookie !== null && bytes.length > client.sendBudget)
    bytes = ctx.encode(uid, handshakeReply(ctx, client));
  if (bytes.length > client.sendBudget) {
    // Never answer an (unproven, spoofable) UDP source with much more than it sent.
    ctx.metrics.drop(DropReason.UdpAmplification);
    return;
  }
  // A client handshakes once, twice with gamewire's cookie, maybe once more after a lost reply,
  // and on a lossy path again every 2 s; a source repeating it faster is flooding, and is not
  // answered more often than that.
  const now = performance.now();
  client.handshakes ??= new TokenBucket(HANDSHAKES_PER_SECOND, HANDSHAKE_BURST, now);
  if (!client.handshakes.take(now)) {
    ctx.metrics.drop(DropReason.HandshakeRepeated);
    return;
  }
  client.handshaked = true;
  client.engine = m.engine;
  client.platform = m.platform;
  client.send(bytes, Priority.Critical);
}

/** Spec §4.1: confirm with the request's uid, then the Leave cleanup, then forget the client. */
export function handleDisconnect(ctx: RelayContext, client: RelayClient, uid: number): void {
  ctx.send(client, uid, { type: 'Disconnect', reason: null }, Priority.Critical);
  ctx.dropClient(client, QuitType.Normal, null);
  ctx.metrics.close(CloseReason.Disconnect);
}

/** Echoes the client's 8 timestamp bytes unchanged (as a bigint) and adds the server's clock. */
export function handleLatency(ctx: RelayContext, client: RelayClient, uid: number, m: Msg<'Latency'>): void {
  ctx.send(
    client,
    uid,
    { type: 'Latency', clientTimestamp: m.timestamp, serverTimestamp: BigInt(Date.now()) },
    Priority.High,
  );
}

/** The Authentification reply of a success. */
function authSuccess(userId: number, serverAddress: string, displayName: string): ServerMessage {
  return { type: 'Authentification', result: AuthResult.Success, userId, serverAddress, displayName };
}

export function handleAuthentification(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'Authentification'>,
): void {
  if (client.auth === 'done' && m.accessToken === client.authToken) {
    // Asked again after success: over UDP the reply can be lost, and Reliable has no acks, so a
    // client that retries would wait forever for an answer the reference server never repeats.
    // The same token gets the same identity again, which grants nothing new (no second master
    // check); another token is ignored, as the reference server does.
    ctx.metrics.count(Counter.AuthRepeatedAnswered);
    ctx.send(client, uid, authSuccess(client.userId, client.userServer, client.displayName), Priority.High);
    return;
  }
  if (client.auth !== 'none') {
    // Still with the master: its answer is on the way.
    ctx.metrics.drop(DropReason.AuthRepeated);
    return;
  }
  if ((m.flags & AuthFlags.UseGuest) !== 0) {
    ctx.send(
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
    ctx.send(
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
    attempt = ctx.authenticate({ token: m.accessToken, tokenType, ip: client.ip, clientId: client.id });
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
        const bytes = ctx.encode(
          uid,
          authSuccess(outcome.userId, outcome.serverAddress, outcome.displayName),
        );
        client.auth = 'done';
        client.authToken = m.accessToken;
        client.userId = outcome.userId;
        client.userServer = outcome.serverAddress;
        client.displayName = outcome.displayName;
        client.userFlags = outcome.flags ?? 0;
        ctx.metrics.count(Counter.Authenticated);
        client.send(bytes, Priority.High);
        return;
      }
      const bytes =
        outcome.result === AuthResult.Blacklisted
          ? ctx.encode(uid, {
              type: 'Authentification',
              result: outcome.result,
              expireAt: toDateTime(outcome.expireAt),
              reason: outcome.reason,
            })
          : ctx.encode(uid, { type: 'Authentification', result: outcome.result, reason: outcome.reason });
      // A failed attempt may be retried with another token.
      client.auth = 'none';
      ctx.metrics.count(Counter.AuthFailed);
      client.send(bytes, Priority.High);
    })
    .catch((err: unknown) => {
      // Whatever went wrong (a bad outcome from the authenticator, an encoding error), the
      // process must not see an unhandled rejection and the client must not stay 'pending'.
      ctx.metrics.count(Counter.AuthError);
      ctx.log.warn({ err, client: client.id }, 'authentification failed unexpectedly');
      if (client.closed) return;
      client.auth = 'none';
      client.userId = 0;
      client.userServer = '';
      client.displayName = '';
      client.userFlags = 0;
      try {
        ctx.send(
          client,
          uid,
          {
            type: 'Authentification',
            result: AuthResult.MasterError,
            reason: 'Authentification failed on the ctx.',
          },
          Priority.High,
        );
      } catch {
        ctx.disconnect(client, 'Authentification failed.', QuitType.UnknownError);
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

/** Public instances only (docs/nox-relay.md), paged to fit one packet. */
export function handleSessions(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'Sessions'>,
): void {
  const listed = [...ctx.instances.values()]
    .filter((i) => (i.flags & InstanceFlags.IsPublic) !== 0)
    .sort((a, b) => a.id - b.id);
  const per = sessionsPerPage(ctx.options.maxPacketBytes);
  const total = Math.min(255, Math.ceil(listed.length / per));
  const page = m.page < total ? listed.slice(m.page * per, (m.page + 1) * per) : [];
  // An unproven UDP client sees its own aliases (docs/security.md, instance aliases).
  const aliases = ctx.instanceAliases(client);
  const wireId = (id: number) => {
    const alias = aliases?.aliasOf[id] ?? -1;
    return alias >= 0 ? alias : id;
  };
  ctx.send(
    client,
    uid,
    {
      type: 'Sessions',
      instances: page.map((i) => ({
        flags: i.flags >>> 0,
        internalId: wireId(i.id),
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
