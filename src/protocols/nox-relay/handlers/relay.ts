/**
 * Instance traffic relayed between members: Transform (the hot path), Teleport, Custom,
 * AvatarChanged and AvatarParams. A relayed message is encoded once and the same bytes go to
 * every recipient.
 */
import type { WireWriter } from '../../../wire/index.js';
import {
  AvatarChangedResult,
  PlayerFlags,
  PlayerStatus,
  Priority,
  S2C,
  SELF,
  TransformFlags,
  TransformType,
} from '../constants.js';
import type { RelayContext } from '../context.js';
import {
  type Instance,
  type Player,
  type StoredTransform,
  TRANSFORM_START_VALUES,
  TRANSFORM_VECTOR_FLAGS,
  TRANSFORM_VECTORS,
} from '../instances.js';
import type { ClientMessage, ServerMessage, TransformMessage } from '../messages.js';
import { Counter, DropReason, notReady } from '../reasons.js';
import type { RelayClient } from '../session.js';

type Msg<T extends ClientMessage['type']> = Extract<ClientMessage, { type: T }>;

/** The member of `iid` that `client` controls, if it may send instance traffic (status ≥ Traveling). */
function activePlayer(
  ctx: RelayContext,
  client: RelayClient,
  iid: number,
  what: 'transform' | 'teleport' | 'avatar_params',
): Player | undefined {
  const p = client.players.get(iid);
  if (p === undefined || p.status < PlayerStatus.Traveling) {
    ctx.metrics.drop(notReady(what));
    return undefined;
  }
  return p;
}

/** Resolves the target of a request (0xFFFF or own id = self; others need HasPrivilege). */
function target(p: Player, playerId: number): Player | undefined {
  if (playerId === SELF || playerId === p.id) return p;
  if ((p.flags & PlayerFlags.HasPrivilege) === 0) return undefined;
  const t = p.instance.players.get(playerId);
  return t !== undefined && t.status === PlayerStatus.Ready ? t : undefined;
}

/** Sends `bytes` to every member that knows `about`, except `except`; `about` itself too when `alsoAbout`. */
function fanOut(
  inst: Instance,
  about: Player,
  except: Player | null,
  bytes: Buffer,
  priority: Priority,
  alsoAbout: boolean,
): number {
  let n = 0;
  const members = inst.members;
  for (let i = 0; i < members.length; i++) {
    const r = members[i]!;
    if (r === except) continue;
    if (r === about ? alsoAbout : r.known.has(about)) {
      r.client.send(bytes, priority);
      n++;
    }
  }
  return n;
}

// ---- Transform ------------------------------------------------------------------------------

/** The component names of a vector of `size` components. */
const COMPONENTS = ['x', 'y', 'z', 'w'] as const;

export function transformMessage(iid: number, playerId: number, st: StoredTransform): TransformMessage {
  const m: Record<string, unknown> = {
    type: 'Transform',
    instanceId: iid,
    transformType: TransformType.OnPlayer,
    playerId,
    rig: st.rig,
    flags: st.flags,
  };
  for (const { flag, field, at, size } of TRANSFORM_VECTORS) {
    if ((st.flags & flag) === 0) continue;
    const v: Record<string, number> = {};
    for (let i = 0; i < size; i++) v[COMPONENTS[i]!] = st.values[at + i]!;
    m[field] = v;
  }
  return m as TransformMessage;
}

/**
 * The relay packet written straight from the stored state, without building a message object:
 * the hot path. Produces exactly the bytes of the declared TransformMsg (a test checks this).
 */
export function writeTransformRelay(w: WireWriter, iid: number, playerId: number, st: StoredTransform): void {
  const at = w.reserve(2);
  w.u16be(0);
  w.u8(S2C.Transform);
  w.u8(iid);
  w.u8(TransformType.OnPlayer);
  w.u16be(playerId);
  w.u16be(st.rig);
  const f = st.flags;
  w.u8(f);
  const values = st.values;
  for (let k = 0; k < TRANSFORM_VECTORS.length; k++) {
    const vector = TRANSFORM_VECTORS[k]!;
    if ((f & vector.flag) === 0) continue;
    for (let i = vector.at, end = vector.at + vector.size; i < end; i++) w.f32be(values[i]!);
  }
  w.patchU16be(at, w.offset - at);
}

/** A rig's state before its first Transform. */
export function newStored(rig: number): StoredTransform {
  return {
    rig,
    flags: 0,
    values: Float64Array.from(TRANSFORM_START_VALUES),
    lastSent: Number.NEGATIVE_INFINITY,
    dirty: false,
  };
}

const far = (a: number, b: number, t: number) => !(Math.abs(a - b) <= t);

/**
 * Merges an update into the stored state; true when something moved beyond the threshold (or a
 * vector arrived for the first time, or the rig was reset).
 */
export function mergeTransform(st: StoredTransform, m: TransformMessage, threshold: number): boolean {
  let changed = false;
  const f = m.flags;
  const values = st.values;
  if (f & TransformFlags.Reset) {
    st.flags = 0;
    values.set(TRANSFORM_START_VALUES);
    changed = true;
  }
  const had = st.flags;
  for (let k = 0; k < TRANSFORM_VECTORS.length; k++) {
    const { flag, field, at, size } = TRANSFORM_VECTORS[k]!;
    if ((f & flag) === 0) continue;
    // The decoder gives every vector its flag announces (w only for the rotation).
    const v = m[field]! as { x: number; y: number; z: number; w?: number };
    if (
      (had & flag) === 0 ||
      far(v.x, values[at]!, threshold) ||
      far(v.y, values[at + 1]!, threshold) ||
      far(v.z, values[at + 2]!, threshold) ||
      (size === 4 && far(v.w!, values[at + 3]!, threshold))
    )
      changed = true;
    values[at] = v.x;
    values[at + 1] = v.y;
    values[at + 2] = v.z;
    if (size === 4) values[at + 3] = v.w!;
  }
  st.flags = had | (f & TRANSFORM_VECTOR_FLAGS);
  return changed;
}

function flush(ctx: RelayContext, owner: Player, st: StoredTransform, now: number, alsoOwner: boolean): void {
  st.dirty = false;
  st.lastSent = now;
  const w = ctx.fanWriter.reset();
  writeTransformRelay(w, owner.instance.id, owner.id, st);
  // One copy for the whole fan-out: the sockets keep a reference until the bytes are out.
  const bytes = w.toBuffer();
  const n = fanOut(owner.instance, owner, null, bytes, Priority.Low, alsoOwner);
  ctx.metrics.count(Counter.TransformsRelayed);
  ctx.metrics.count(Counter.TransformFanout, n);
}

/** Sends what the TPS limit held back, then re-arms while anything is still pending. */
function scheduleFlush(ctx: RelayContext, inst: Instance, delay: number): void {
  if (inst.flushTimer !== undefined) return;
  inst.flushTimer = setTimeout(
    () => {
      inst.flushTimer = undefined;
      const now = performance.now();
      const interval = 1000 / inst.tps;
      let wait = Number.POSITIVE_INFINITY;
      for (const p of inst.members) {
        for (const st of p.transforms.values()) {
          if (!st.dirty) continue;
          const left = interval - (now - st.lastSent);
          if (left <= 0) flush(ctx, p, st, now, false);
          else wait = Math.min(wait, left);
        }
      }
      if (Number.isFinite(wait)) scheduleFlush(ctx, inst, wait);
    },
    Math.max(1, Math.ceil(delay)),
  );
  inst.flushTimer.unref();
}

export function handleTransform(ctx: RelayContext, client: RelayClient, m: Msg<'Transform'>): void {
  const p = activePlayer(ctx, client, m.instanceId, 'transform');
  if (p === undefined) return;
  if (m.transformType !== TransformType.OnPlayer) {
    // ByPath and OnObject are declared but not relayed, as in the reference server (docs/nox-relay.md).
    ctx.metrics.drop(DropReason.TransformUnsupported);
    return;
  }
  const owner = target(p, m.playerId!);
  if (owner === undefined) {
    ctx.metrics.drop(DropReason.TransformForbidden);
    return;
  }
  const inst = p.instance;
  let st = owner.transforms.get(m.rig!);
  if (st === undefined) {
    if (owner.transforms.size >= 64) {
      ctx.metrics.drop(DropReason.TransformRigs);
      return;
    }
    st = newStored(m.rig!);
    owner.transforms.set(m.rig!, st);
  }
  if (!mergeTransform(st, m, inst.threshold)) {
    ctx.metrics.drop(DropReason.TransformBelowThreshold);
    return;
  }
  st.dirty = true;
  const now = performance.now();
  const interval = 1000 / inst.tps;
  if (now - st.lastSent >= interval) flush(ctx, owner, st, now, owner !== p);
  else scheduleFlush(ctx, inst, interval - (now - st.lastSent));
}

// ---- Teleport, Custom -----------------------------------------------------------------------

/** gamewire's Teleport: sets the target's Base rig (position + rotation, after a reset) and relays. */
export function handleTeleport(ctx: RelayContext, client: RelayClient, m: Msg<'Teleport'>): void {
  const p = activePlayer(ctx, client, m.instanceId, 'teleport');
  if (p === undefined) return;
  const owner = target(p, m.playerId);
  if (owner === undefined) {
    ctx.metrics.drop(DropReason.TeleportForbidden);
    return;
  }
  let st = owner.transforms.get(0);
  if (st === undefined) {
    st = newStored(0);
    owner.transforms.set(0, st);
  }
  mergeTransform(
    st,
    {
      type: 'Transform',
      instanceId: m.instanceId,
      transformType: 1,
      flags: 0x23,
      position: m.position,
      rotation: m.rotation,
    },
    0,
  );
  const bytes = ctx.encode(0, {
    type: 'Teleport',
    instanceId: m.instanceId,
    playerId: owner.id,
    position: m.position,
    rotation: m.rotation,
  });
  fanOut(p.instance, owner, p, bytes, Priority.High, owner !== p);
}

/** gamewire's Custom: the opaque bytes go to the other members, tagged with the sender's id. */
export function handleCustom(ctx: RelayContext, client: RelayClient, m: Msg<'Custom'>): void {
  const p = client.players.get(m.instanceId);
  if (p === undefined) {
    ctx.metrics.drop(DropReason.CustomNotMember);
    return;
  }
  if (5 + 3 + m.data.length > ctx.options.maxPacketBytes) {
    ctx.metrics.drop(DropReason.CustomTooLarge);
    return;
  }
  const bytes = ctx.encode(0, { type: 'Custom', instanceId: m.instanceId, playerId: p.id, data: m.data });
  fanOut(p.instance, p, p, bytes, Priority.Low, false);
}

// ---- avatars --------------------------------------------------------------------------------

/** Longest avatar server address (UTF-8 bytes) and most parameters stored per player. */
export const MAX_AVATAR_SERVER_BYTES = 255;
export const MAX_AVATAR_PARAMS = 1024;

export function handleAvatarChanged(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'AvatarChanged'>,
): void {
  const iid = m.instanceId;
  const failed = (reason: string) =>
    ctx.send(
      client,
      uid,
      { type: 'AvatarChanged', instanceId: iid, result: AvatarChangedResult.Failed, reason },
      Priority.High,
    );
  const inst = ctx.instances.get(iid);
  if (inst === undefined) {
    failed('Invalid instance');
    return;
  }
  const p = client.players.get(iid);
  if (p === undefined || p.status < PlayerStatus.Traveling) {
    failed('You are not a valid player');
    return;
  }
  let owner = p;
  if (m.playerId !== SELF && m.playerId !== p.id) {
    const t = inst.players.get(m.playerId);
    if (t === undefined) {
      failed('Player not found');
      return;
    }
    if ((p.flags & PlayerFlags.HasPrivilege) === 0) {
      failed("You are not allowed to change this player's avatar");
      return;
    }
    owner = t;
  }
  if (Buffer.byteLength(m.avatarServer, 'utf8') > MAX_AVATAR_SERVER_BYTES) {
    ctx.metrics.drop(DropReason.AvatarChangedTooLarge);
    failed('Invalid avatar server');
    return;
  }
  const avatar = { avatarId: m.avatarId, avatarServer: m.avatarServer, avatarVersion: m.avatarVersion };
  const notice: ServerMessage = {
    type: 'AvatarChanged',
    instanceId: iid,
    result: AvatarChangedResult.Changing,
    playerId: owner.id,
    ...avatar,
  };
  const bytes = ctx.encode(0, notice);
  if (bytes.length > ctx.options.maxPacketBytes) {
    ctx.metrics.drop(DropReason.AvatarChangedTooLarge);
    failed('Avatar change too large');
    return;
  }
  owner.avatar = avatar;
  owner.params.clear();
  owner.paramBytes = 0;
  ctx.send(
    client,
    uid,
    { type: 'AvatarChanged', instanceId: iid, result: AvatarChangedResult.Success, reason: null },
    Priority.High,
  );
  fanOut(inst, owner, p, bytes, Priority.Normal, owner !== p);
}

export function handleAvatarParams(ctx: RelayContext, client: RelayClient, m: Msg<'AvatarParams'>): void {
  const p = activePlayer(ctx, client, m.instanceId, 'avatar_params');
  if (p === undefined) return;
  const owner = target(p, m.playerId);
  if (owner === undefined || owner.avatar === undefined) {
    ctx.metrics.drop(DropReason.AvatarParamsRefused);
    return;
  }
  // Caps (docs/nox-relay.md, Limits): each value, the player's stored total, and the relay's
  // encoded size (one packet, as for Custom). A message breaking any of them is dropped whole.
  const o = ctx.options;
  let total = owner.paramBytes;
  let count = owner.params.size;
  const seen = new Map<number, number>();
  for (const param of m.parameters) {
    if (param.value.length > o.maxAvatarParamBytes) {
      ctx.metrics.drop(DropReason.AvatarParamsTooLarge);
      return;
    }
    const old = seen.get(param.parameterId) ?? owner.params.get(param.parameterId)?.length;
    if (old === undefined) count++;
    total += param.value.length - (old ?? 0);
    seen.set(param.parameterId, param.value.length);
  }
  if (total > o.maxAvatarParamsTotal || count > MAX_AVATAR_PARAMS) {
    ctx.metrics.drop(DropReason.AvatarParamsTooLarge);
    return;
  }
  const bytes = ctx.encode(0, {
    type: 'AvatarParams',
    instanceId: m.instanceId,
    playerId: owner.id,
    parameters: m.parameters,
  });
  if (bytes.length > o.maxPacketBytes) {
    ctx.metrics.drop(DropReason.AvatarParamsTooLarge);
    return;
  }
  for (const param of m.parameters) owner.params.set(param.parameterId, Buffer.from(param.value));
  owner.paramBytes = total;
  fanOut(p.instance, owner, p, bytes, Priority.Normal, owner !== p);
}
