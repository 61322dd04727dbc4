/**
 * ServerConfig (docs/nox-relay.md): high-privilege members (InstanceOwner, MasterModerator) read
 * or change an instance. The requester gets Success, the other members Change. The password is
 * never sent back, only has_password.
 */
import { InstanceFlags, PlayerFlags, Priority, ServerConfigFlags, ServerConfigResult } from '../constants.js';
import type { RelayContext } from '../context.js';
import type { Instance } from '../instances.js';
import type { ClientMessage, ServerMessage } from '../messages.js';
import { Counter } from '../reasons.js';
import type { RelayClient } from '../session.js';

type Msg<T extends ClientMessage['type']> = Extract<ClientMessage, { type: T }>;

function configMessage(inst: Instance, result: number, flags: number): ServerMessage {
  return {
    type: 'ServerConfig',
    instanceId: inst.id,
    result,
    configFlags: flags,
    ...(flags & ServerConfigFlags.Tps ? { tps: inst.tps } : {}),
    ...(flags & ServerConfigFlags.Threshold ? { threshold: inst.threshold } : {}),
    ...(flags & ServerConfigFlags.Capacity ? { capacity: inst.capacity } : {}),
    ...(flags & ServerConfigFlags.Flags ? { instanceFlags: inst.flags >>> 0 } : {}),
    ...(flags & ServerConfigFlags.Password ? { hasPassword: inst.hasPassword ? 1 : 0 } : {}),
  };
}

export function handleServerConfig(
  ctx: RelayContext,
  client: RelayClient,
  uid: number,
  m: Msg<'ServerConfig'>,
): void {
  const iid = m.instanceId;
  const failure = (reason: string) => {
    ctx.metrics.count(Counter.ServerConfigRefused);
    ctx.send(
      client,
      uid,
      { type: 'ServerConfig', instanceId: iid, result: ServerConfigResult.Failure, reason },
      Priority.Normal,
    );
  };
  const inst = ctx.instances.get(iid);
  if (inst === undefined) {
    failure('Instance not found.');
    return;
  }
  const p = client.players.get(iid);
  if (p === undefined) {
    failure('You are not in this instance.');
    return;
  }
  if ((p.flags & PlayerFlags.HasHighPrivilege) === 0) {
    failure('Permission denied.');
    return;
  }
  const f = m.configFlags;
  if (f === ServerConfigFlags.None) {
    ctx.send(
      client,
      uid,
      configMessage(inst, ServerConfigResult.Success, ServerConfigFlags.All),
      Priority.Normal,
    );
    return;
  }
  if ((f & ServerConfigFlags.All) === 0) {
    failure('No valid configuration flags provided.');
    return;
  }
  // Validate everything first, then apply all at once: a refused request changes nothing.
  if (m.tps !== undefined && !(Number.isInteger(m.tps) && m.tps >= 1)) {
    failure('TPS must be at least 1.');
    return;
  }
  if (m.threshold !== undefined && !(m.threshold >= 0 && Number.isFinite(m.threshold))) {
    failure('Threshold must be a number >= 0.');
    return;
  }
  // Flags and password stay consistent: UsePassword is set exactly when a password is stored.
  // The Flags field wins (reference ctx): clearing UsePassword removes the password, setting
  // it needs a password (already stored, or in this request).
  const passwordAfter = m.password !== undefined ? m.password !== '' : inst.hasPassword;
  let clearPassword = false;
  if (m.instanceFlags !== undefined) {
    const wantsPassword = (m.instanceFlags & InstanceFlags.UsePassword) !== 0;
    if (wantsPassword && !passwordAfter) {
      failure('UsePassword needs a password.');
      return;
    }
    clearPassword = !wantsPassword && passwordAfter;
  }
  if (m.tps !== undefined) inst.tps = m.tps;
  if (m.threshold !== undefined) inst.threshold = m.threshold;
  if (m.capacity !== undefined) inst.capacity = m.capacity;
  if (m.password !== undefined) inst.setPassword(m.password);
  if (m.instanceFlags !== undefined) {
    if (clearPassword) inst.setPassword('');
    inst.flags = m.instanceFlags >>> 0;
  }
  ctx.metrics.count(Counter.ServerConfigChanged);
  const applied = f & ServerConfigFlags.All;
  ctx.send(client, uid, configMessage(inst, ServerConfigResult.Success, applied), Priority.Normal);
  const change = ctx.encode(0, configMessage(inst, ServerConfigResult.Change, applied));
  for (const r of inst.members) if (r !== p) r.client.send(change, Priority.Normal);
}
