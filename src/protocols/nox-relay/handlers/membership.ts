/**
 * Membership: Enter, Quit, Traveling, PasswordRequirement, and the Join/Leave notifications.
 *
 * Who hears about whom: a player is sent a Join for every member it should see (all members on
 * its Enter; newcomers while it is Ready; the ones it missed when it becomes Ready). Each player
 * remembers whom it was told about (`known`), and exactly those players get the Leave, so no
 * client keeps a ghost and none hears of a player it never saw. See docs/nox-relay.md.
 */
import {
  EnterFlags,
  EnterResult,
  InstanceFlags,
  PasswordRequirementResult,
  PlayerFlags,
  PlayerStatus,
  Priority,
  QuitType,
  SYSTEM,
  TravelingAction,
  TravelingResult,
} from '../constants.js';
import type { RelayContext } from '../context.js';
import { Player } from '../instances.js';
import type { ClientMessage, ServerMessage } from '../messages.js';
import { Counter, DropReason } from '../reasons.js';
import type { RelayClient } from '../session.js';
import { transformMessage } from './relay.js';

type Msg<T extends ClientMessage['type']> = Extract<ClientMessage, { type: T }>;

function enterFail(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  iid: number,
  result: number,
  reason: string,
): void {
  ctx.metrics.count(Counter.EnterRefused);
  ctx.send(client, uid, { type: 'Enter', instanceId: iid, result, reason }, Priority.High);
}

export function joinMessage(about: Player): ServerMessage {
  return {
    type: 'Join',
    instanceId: about.instance.id,
    playerFlags: about.flags >>> 0,
    playerId: about.id,
    userId: about.client.userId,
    serverAddress: about.client.userServer,
    displayName: about.displayName,
    createdAt: about.createdAt,
    engine: about.client.engine,
    platform: about.client.platform,
  };
}

/** Join, then the avatar, then the stored transforms of `about`, to `to` (docs/nox-relay.md order). */
export function introduce(ctx: RelayContext, to: Player, about: Player): void {
  to.known.add(about);
  const c = to.client;
  ctx.send(c, 0, joinMessage(about), Priority.High);
  if (about.avatar !== undefined) {
    ctx.send(
      c,
      0,
      {
        type: 'AvatarChanged',
        instanceId: about.instance.id,
        result: 0,
        playerId: about.id,
        ...about.avatar,
      },
      Priority.Normal,
    );
  }
  for (const st of about.transforms.values()) {
    if (st.flags !== 0) ctx.send(c, 0, transformMessage(about.instance.id, about.id, st), Priority.Normal);
  }
}

export function handleEnter(ctx: RelayContext, client: RelayClient, uid: number, m: Msg<'Enter'>): void {
  const iid = m.instanceId;
  // Spec §1.8: authentication before any action. Offline servers authenticate any token.
  if (client.auth !== 'done') {
    enterFail(ctx, client, uid, iid, EnterResult.Refused, 'You are not authenticated.');
    return;
  }
  const inst = ctx.instances.get(iid);
  if (inst === undefined) {
    enterFail(ctx, client, uid, iid, EnterResult.NotFound, 'Instance not found.');
    return;
  }
  if (client.players.has(iid)) {
    enterFail(ctx, client, uid, iid, EnterResult.Unknown, 'Already in an instance.');
    return;
  }
  if (
    inst.capacity !== 0 &&
    inst.players.size >= inst.capacity &&
    (inst.flags & InstanceFlags.AllowOverload) === 0
  ) {
    enterFail(ctx, client, uid, iid, EnterResult.Full, 'Instance is full.');
    return;
  }
  const ban = inst.blacklist.get(client.userId);
  if (ban !== undefined && (ban.expiresAt === 0 || ban.expiresAt > Date.now())) {
    ctx.metrics.count(Counter.EnterRefused);
    ctx.send(
      client,
      uid,
      {
        type: 'Enter',
        instanceId: iid,
        result: EnterResult.Blacklisted,
        expiresAt: BigInt(ban.expiresAt),
        reason: ban.reason,
      },
      Priority.High,
    );
    return;
  }
  const owner = inst.owners.has(client.userId);
  if ((inst.flags & InstanceFlags.UseWhitelist) !== 0 && !owner && !inst.whitelist.has(client.userId)) {
    enterFail(ctx, client, uid, iid, EnterResult.NotWhitelisted, 'You are not whitelisted.');
    return;
  }
  const asBot = (m.flags & EnterFlags.AsBot) !== 0;
  if (asBot && (inst.flags & InstanceFlags.AuthorizeBot) === 0) {
    enterFail(ctx, client, uid, iid, EnterResult.Refused, 'Bots are not allowed in this instance.');
    return;
  }
  let pseudonyme: string | undefined;
  if (m.pseudonyme !== undefined) {
    pseudonyme = m.pseudonyme.trim();
    if (pseudonyme.length < 3 || pseudonyme.length > 32) {
      enterFail(ctx, client, uid, iid, EnterResult.InvalidPseudonyme, 'Invalid pseudonyme.');
      return;
    }
  }
  if (!inst.checkPassword(m.password)) {
    enterFail(ctx, client, uid, iid, EnterResult.IncorrectPassword, 'Incorrect password.');
    return;
  }

  let flags = client.userFlags;
  if (asBot) flags |= PlayerFlags.IsBot;
  if ((m.flags & EnterFlags.HideInList) !== 0) flags |= PlayerFlags.HideInList;
  if (owner) flags |= PlayerFlags.InstanceOwner;
  if (inst.moderators.has(client.userId)) flags |= PlayerFlags.InstanceModerator;
  if (ctx.offline) flags |= PlayerFlags.AuthUnverified;
  if (pseudonyme !== undefined) flags |= PlayerFlags.HasCustomDisplay;
  const id = inst.freeId();
  const name = pseudonyme ?? (client.displayName !== '' ? client.displayName : `Player ${id}`);
  const p = new Player(id, client, inst, flags, name, PlayerStatus.Preparing);
  inst.add(p);
  client.players.set(iid, p);
  ctx.metrics.count(Counter.Entered);
  ctx.send(
    client,
    uid,
    {
      type: 'Enter',
      instanceId: iid,
      result: EnterResult.Success,
      playerFlags: flags >>> 0,
      playerId: id,
      userId: client.userId,
      serverAddress: client.userServer,
      displayName: name,
      createdAt: p.createdAt,
      tps: inst.tps,
      threshold: inst.threshold,
    },
    Priority.High,
  );
  for (const q of inst.members) {
    if (q === p) continue;
    introduce(ctx, p, q);
    if (q.status === PlayerStatus.Ready) introduce(ctx, q, p);
  }
}

/** Leave as `to` should see it (docs/nox-relay.md: the documentation's audience table). */
function leaveFor(
  to: Player,
  left: Player,
  quitType: number,
  reason: string | null,
  by: Player | null,
): ServerMessage {
  const moderation = quitType === QuitType.ModerationKick || quitType === QuitType.VoteKick;
  const base = { type: 'Leave' as const, instanceId: left.instance.id, playerId: left.id };
  if (to === by)
    return { ...base, quitType, moderatorId: moderation ? by.id : null, reason: moderation ? reason : null };
  if ((to.flags & PlayerFlags.HasPrivilege) !== 0)
    return { ...base, quitType: QuitType.Normal, moderatorId: null, reason: null };
  return { ...base, quitType, moderatorId: moderation ? (by?.id ?? SYSTEM) : null, reason: null };
}

/**
 * Takes a player out of its instance: Leave to everyone who knew it, the reverse Leaves to the
 * leaver when it is still there to hear them, the Quit confirmation when `confirmUid` is set.
 */
export function removePlayer(
  ctx: RelayContext,
  left: Player,
  quitType: number,
  reason: string | null,
  by: Player | null,
  confirmUid: number | null,
  leaverListens: boolean,
): void {
  const inst = left.instance;
  if (inst.players.get(left.id) !== left) return;
  for (const r of inst.members) {
    if (r === left || !r.known.has(left)) continue;
    r.known.delete(left);
    ctx.send(r.client, 0, leaveFor(r, left, quitType, reason, by), Priority.High);
  }
  if (leaverListens) {
    for (const q of left.known) {
      ctx.send(
        left.client,
        0,
        {
          type: 'Leave',
          instanceId: inst.id,
          quitType: QuitType.Normal,
          playerId: q.id,
          moderatorId: null,
          reason: null,
        },
        Priority.High,
      );
    }
    if (confirmUid !== null) {
      ctx.send(
        left.client,
        confirmUid,
        { type: 'Quit', instanceId: inst.id, quitType, reason },
        Priority.Critical,
      );
    }
  }
  left.known.clear();
  left.status = PlayerStatus.None;
  inst.remove(left);
  left.client.players.delete(inst.id);
  ctx.metrics.count(Counter.Left);
}

export function handleQuit(ctx: RelayContext, client: RelayClient, uid: number, m: Msg<'Quit'>): void {
  const iid = m.instanceId;
  const fail = (reason: string) =>
    ctx.send(
      client,
      uid,
      { type: 'Quit', instanceId: iid, quitType: QuitType.UnknownError, reason },
      Priority.Critical,
    );
  if (!ctx.instances.has(iid)) {
    fail('Instance not found.');
    return;
  }
  const p = client.players.get(iid);
  if (p === undefined) {
    fail('You are not in this instance.');
    return;
  }
  // A player may leave on its own (Normal, Timeout); kicks are not self-service (docs/nox-relay.md).
  const allowed =
    m.quitType === QuitType.Normal ||
    m.quitType === QuitType.Timeout ||
    (m.quitType === QuitType.ModerationKick && (p.flags & PlayerFlags.HasPrivilege) !== 0);
  if (!allowed) {
    ctx.metrics.drop(DropReason.QuitTypeRefused);
    return;
  }
  removePlayer(ctx, p, m.quitType, m.reason, p, uid, true);
}

/** Server-side moderation: kicks `playerId` out of `iid` (ModerationKick), `by` a member or the system. */
export function kickPlayer(
  ctx: RelayContext,
  iid: number,
  playerId: number,
  reason: string,
  byPlayerId?: number,
): boolean {
  const inst = ctx.instances.get(iid);
  const p = inst?.players.get(playerId);
  if (inst === undefined || p === undefined) return false;
  const by = byPlayerId === undefined ? null : (inst.players.get(byPlayerId) ?? null);
  removePlayer(ctx, p, QuitType.ModerationKick, reason, by, 0, true);
  return true;
}

export function handleTraveling(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'Traveling'>,
): void {
  const iid = m.instanceId;
  const unknown = (reason: string) =>
    ctx.send(
      client,
      uid,
      { type: 'Traveling', instanceId: iid, result: TravelingResult.Unknown, reason },
      Priority.High,
    );
  const inst = ctx.instances.get(iid);
  if (inst === undefined) {
    unknown('Instance not found.');
    return;
  }
  const p = client.players.get(iid);
  if (p === undefined) {
    unknown('You are not in this instance.');
    return;
  }
  switch (m.action) {
    case TravelingAction.Travel: {
      if (p.status === PlayerStatus.None) {
        unknown('Player is not ready to travel.');
        return;
      }
      if (inst.world === null) {
        unknown('World is not set for the instance.');
        return;
      }
      p.status = PlayerStatus.Traveling;
      ctx.send(
        client,
        uid,
        {
          type: 'Traveling',
          instanceId: iid,
          result: TravelingResult.UseMaster,
          worldMasterId: inst.world.masterId,
          worldAddress: inst.world.address,
          worldVersion: inst.world.version,
        },
        Priority.High,
      );
      return;
    }
    case TravelingAction.Ready: {
      if (p.status !== PlayerStatus.Traveling) {
        unknown('Player is not traveling.');
        return;
      }
      p.status = PlayerStatus.Ready;
      ctx.send(
        client,
        uid,
        { type: 'Traveling', instanceId: iid, result: TravelingResult.Ready },
        Priority.High,
      );
      // Catch up on the members that entered while this player was loading.
      for (const q of inst.members) if (q !== p && !p.known.has(q)) introduce(ctx, p, q);
      return;
    }
    case TravelingAction.Failed:
      ctx.metrics.count(Counter.TravelFailed);
      return;
    default: {
      unknown(`Action ${m.action} is not supported yet.`);
      return;
    }
  }
}

/** gamewire's PasswordRequirement: does instance `iid` need a password? (docs/nox-relay.md) */
export function handlePasswordRequirement(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'PasswordRequirement'>,
): void {
  const inst = ctx.instances.get(m.instanceId);
  const result =
    inst === undefined
      ? PasswordRequirementResult.NotFound
      : inst.hasPassword
        ? PasswordRequirementResult.Required
        : PasswordRequirementResult.NotRequired;
  ctx.send(client, uid, { type: 'PasswordRequirement', instanceId: m.instanceId, result }, Priority.High);
}
