/**
 * Dispatch: one decoded client packet to its handler. Preconditions that hold for every message
 * (the Handshake first, nesting depth) are checked here; the rest is each handler's business.
 * Reliable and Segmentation are containers: their inner packets go back through `onPacket`.
 */
import type { RelayContext } from './context.js';
import {
  handleAuthentification,
  handleDisconnect,
  handleHandshake,
  handleLatency,
  handleSessions,
} from './handlers/connection.js';
import {
  handleEnter,
  handlePasswordRequirement,
  handleQuit,
  handleTraveling,
} from './handlers/membership.js';
import {
  handleAvatarChanged,
  handleAvatarParams,
  handleCustom,
  handleTeleport,
  handleTransform,
} from './handlers/relay.js';
import { handleServerConfig } from './handlers/server-config.js';
import type { ClientMessage } from './messages.js';
import { Counter, DropReason } from './reasons.js';
import type { Reassembly } from './reassembly.js';
import type { RelayClient } from './session.js';

/** Reliable and Segmentation may nest (a reassembled Reliable, say) this deep, no deeper. */
export const MAX_NESTING = 2;

export interface DispatchContext extends RelayContext {
  readonly reassembly: Reassembly;
  /** One packet `buf[start, end)` from `client`; `depth` > 0 inside Reliable/Segmentation. */
  onPacket(client: RelayClient, buf: Buffer, start: number, end: number, depth: number): void;
}

function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

export function dispatch(
  ctx: DispatchContext,
  client: RelayClient,
  uid: number,
  m: ClientMessage,
  depth: number,
): void {
  if (m.type === 'Handshake') {
    handleHandshake(ctx, client, uid, m);
    return;
  }
  if (!client.handshaked) {
    ctx.metrics.drop(DropReason.NotHandshaked);
    return;
  }
  if (client.aliases !== undefined && 'instanceId' in m) fromAlias(ctx, client, m);
  switch (m.type) {
    case 'Reliable':
    case 'Segmentation':
      if (depth >= MAX_NESTING) {
        ctx.metrics.drop(DropReason.Nesting);
        return;
      }
      if (m.type === 'Reliable') onReliable(ctx, client, m.messages, depth);
      else onSegment(ctx, client, m, depth);
      break;
    case 'Disconnect':
      handleDisconnect(ctx, client, uid);
      break;
    case 'Latency':
      handleLatency(ctx, client, uid, m);
      break;
    case 'Authentification':
      handleAuthentification(ctx, client, uid, m);
      break;
    case 'Sessions':
      handleSessions(ctx, client, uid, m);
      break;
    case 'Enter':
      handleEnter(ctx, client, uid, m);
      break;
    case 'Quit':
      handleQuit(ctx, client, uid, m);
      break;
    case 'Traveling':
      handleTraveling(ctx, client, uid, m);
      break;
    case 'PasswordRequirement':
      handlePasswordRequirement(ctx, client, uid, m);
      break;
    case 'Transform':
      handleTransform(ctx, client, m);
      break;
    case 'Custom':
      handleCustom(ctx, client, m);
      break;
    case 'Teleport':
      handleTeleport(ctx, client, m);
      break;
    case 'AvatarChanged':
      handleAvatarChanged(ctx, client, uid, m);
      break;
    case 'AvatarParams':
      handleAvatarParams(ctx, client, m);
      break;
    case 'ServerConfig':
      handleServerConfig(ctx, client, uid, m);
      break;
  }
}

/**
 * A client listed with instance aliases names instances by them: the message is rewritten to the
 * real id before its handler sees it, and the first non-real id the client uses is judged (its
 * alias proves its address; anything else is a blind guess). Real ids pass unchanged.
 */
function fromAlias(ctx: DispatchContext, client: RelayClient, m: { instanceId: number }): void {
  const aliases = client.aliases!;
  const id = m.instanceId;
  if (ctx.instances.has(id)) return;
  const real = aliases.realOf[id]!;
  if (real >= 0) {
    m.instanceId = real;
    aliases.useAlias(real);
  }
  if (!aliases.judged) {
    aliases.judged = true;
    ctx.judgeAlias(client, real >= 0);
  }
}

/** Each entry is a complete inner packet, dispatched in order (docs/nox-relay.md). */
function onReliable(
  ctx: DispatchContext,
  client: RelayClient,
  entries: readonly Uint8Array[],
  depth: number,
): void {
  ctx.metrics.count(Counter.ReliableBatches);
  for (const raw of entries) {
    if (client.closed) return;
    const e = asBuffer(raw);
    if (e.length < 5 || e.readUInt16BE(0) !== e.length || e.length > ctx.options.maxPacketBytes) {
      ctx.metrics.drop(DropReason.Malformed);
      continue;
    }
    ctx.onPacket(client, e, 0, e.length, depth + 1);
  }
}

/** Stores a segment; a completed session is dispatched as one packet (docs/nox-relay.md). */
function onSegment(
  ctx: DispatchContext,
  client: RelayClient,
  m: Extract<ClientMessage, { type: 'Segmentation' }>,
  depth: number,
): void {
  const whole = ctx.reassembly.accept(client, m, performance.now());
  if (whole === undefined) return;
  if (whole.length < 5 || whole.readUInt16BE(0) !== whole.length) {
    ctx.metrics.drop(DropReason.Malformed);
    return;
  }
  ctx.onPacket(client, whole, 0, whole.length, depth + 1);
}
