/**
 * `gamewire load nox-relay`: players over UDP or TCP (or both) that handshake, authenticate,
 * enter an instance, travel, and send their own transform at a tick rate while receiving
 * everyone else's, as a VR client does. Some transforms can go as Segmentation packets (split
 * into pieces, the way the protocol carries large packets) to exercise reassembly.
 *
 * Each transform carries what the receivers check: the sender's session number, a sequence
 * number and a check value in its velocity, the send time (µs, split into two floats that a
 * float32 holds exactly) in its position. Receivers measure relay latency, loss, duplicates and
 * reordering per sender; a transform whose check does not match is an integrity violation.
 */

import { CommandError, EXIT_USAGE, UsageError } from '../../core/errors.js';
import {
  codeOf,
  type LoadClient,
  type LoadDefinition,
  type LoadRun,
  parseIdList,
  SequenceTracker,
  untilStopped,
} from '../../core/load/index.js';
import { crc16, DecodeError, WireWriter } from '../../wire/index.js';
import { NoxRelayClient } from './client.js';
import { DEFAULT_PORT, EnterResult, InstanceFlags, TransformType } from './constants.js';
import { NoxRelayClientError } from './errors.js';
import type { ClientMessage, ServerMessage } from './messages.js';
import { writeClientPacket } from './packet.js';

interface NoxLoadOptions {
  transport: 'udp' | 'tcp' | 'mixed';
  /** `--instances`, or undefined: the public instances the relay lists, by room. */
  instances: number[] | undefined;
  tickRate: number;
  tokenPrefix: string;
  asBot: boolean;
  proveAddress: boolean;
  segmentShare: number;
  segments: number;
}

/** Position, rotation and velocity (the velocity carries the numbers receivers check). */
const FLAGS = 0x01 | 0x02 | 0x08;
const RIG = 5;

// The float32 bytes the checks digest, reused: no allocation per transform.
const digestFloats = new Float32Array(4);
const digestBytes = new Uint8Array(digestFloats.buffer);

/** The CRC-16 of the first `count` values of `digestFloats` as float32 bytes: below 2^16, so exact in the float32 that carries it. */
function floatsDigest(count: number): number {
  return crc16(digestBytes, 0, count * 4);
}

/** The velocity's check value: a digest of transform `seq` from session `sender` sent at (x, y). */
export function transformCheck(seq: number, sender: number, x: number, y: number): number {
  digestFloats[0] = seq;
  digestFloats[1] = sender;
  digestFloats[2] = x;
  digestFloats[3] = y;
  return floatsDigest(4);
}

/** The position's check value (the send time is in x and y): a digest of both. */
export function positionCheck(x: number, y: number): number {
  digestFloats[0] = x;
  digestFloats[1] = y;
  return floatsDigest(2);
}

/** The avatar turns a little each tick; receivers recompute the rotation from the number. */
function angle(seq: number): number {
  return (seq / 16) % (2 * Math.PI);
}

function parseOptions(raw: Record<string, unknown>): NoxLoadOptions {
  const segments = raw.segments as number;
  return {
    transport: raw.transport as NoxLoadOptions['transport'],
    instances:
      raw.instances === undefined ? undefined : parseIdList(raw.instances as string[], '--instances', 0, 255),
    tickRate: raw.tickRate as number,
    tokenPrefix: raw.tokenPrefix as string,
    asBot: raw.asBot === true,
    proveAddress: raw.proveAddress !== false,
    segmentShare: raw.segmentShare as number,
    segments,
  };
}

type Transform = Extract<ServerMessage, { type: 'Transform' }>;

/** A public instance as the relay lists it (Sessions), with the room it has left. */
interface ListedInstance {
  id: number;
  /** Players it still takes; Infinity for no limit (capacity 0, or AllowOverload). */
  room: number;
  capacity: number;
  players: number;
}

/**
 * The relay's public instances that a load player may enter (no password, no whitelist; bots
 * only where bots are allowed), asked over TCP (Sessions answers real ids there; an unproven UDP
 * client would see aliases). Undefined when the relay cannot be asked (nothing listens on TCP,
 * another implementation): the players then go to instance 0 and their own errors say why.
 */
async function listInstances(
  target: { host: string; port: number },
  asBot: boolean,
  localAddress: string | undefined,
): Promise<ListedInstance[] | undefined> {
  const c = new NoxRelayClient({
    host: target.host,
    port: target.port,
    transport: 'tcp',
    requestTimeoutMs: 3000,
    ...(localAddress === undefined ? {} : { localAddress }),
  });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.handshake('node', 'gamewire-load');
    const out: ListedInstance[] = [];
    for (let page = 0, total = 1; page < total && page < 255; page++) {
      const r = await c.sessions(page);
      total = r.totalPages;
      for (const i of r.instances) {
        if ((i.flags & (InstanceFlags.UsePassword | InstanceFlags.UseWhitelist)) !== 0) continue;
        if (asBot && (i.flags & InstanceFlags.AuthorizeBot) === 0) continue;
        const unlimited = i.capacity === 0 || (i.flags & InstanceFlags.AllowOverload) !== 0;
        out.push({
          id: i.internalId,
          room: unlimited ? Number.POSITIVE_INFINITY : Math.max(0, i.capacity - i.currentPlayers),
          capacity: i.capacity,
          players: i.currentPlayers,
        });
      }
    }
    return out;
  } catch {
    return undefined;
  } finally {
    await c.disconnect('load: instance list').catch(() => {});
    await c.close().catch(() => {});
  }
}

/**
 * Which instance each client slot enters: `--instances` in turn, or the listed instances in turn
 * while they have room. More players than the listed instances hold is refused before any
 * traffic, with what to do instead: a crowd that is half "Instance is full" measures nothing.
 */
export function assignInstances(
  clients: number,
  given: readonly number[] | undefined,
  listed: readonly ListedInstance[] | undefined,
): number[] {
  if (given !== undefined) return Array.from({ length: clients }, (_, slot) => given[slot % given.length]!);
  if (listed === undefined) return Array.from({ length: clients }, () => 0);
  const room = listed.reduce((n, i) => n + i.room, 0);
  if (room < clients) {
    const each = listed.map((i) => `instance ${i.id}: ${i.players} of ${i.capacity} players`).join(', ');
    throw new CommandError(
      'ERR_LOAD_CAPACITY',
      `--clients ${clients} does not fit: the relay's public instances have room for ${room} more player${room === 1 ? '' : 's'}` +
        `${each === '' ? ' (it lists none that a load player may enter)' : ` (${each})`}; ` +
        `run --clients ${Math.max(1, room)} or fewer, or serve more (or larger) instances ` +
        '(gamewire serve nox-relay --instances FILE, docs/nox-relay.md): the players spread over every public one',
      EXIT_USAGE,
    );
  }
  const left = listed.map((i) => i.room);
  const out: number[] = [];
  let at = 0;
  while (out.length < clients) {
    if (left[at]! > 0) {
      out.push(listed[at]!.id);
      left[at]!--;
    }
    at = (at + 1) % listed.length;
  }
  return out;
}

async function prepare(run: LoadRun) {
  const o = parseOptions(run.options);
  const target = run.settings.target;
  if (target === undefined) throw new UsageError('gamewire load nox-relay needs --target HOST:PORT');
  const slotInstance = assignInstances(
    run.settings.clients,
    o.instances,
    o.instances === undefined ? await listInstances(target, o.asBot, run.settings.from[0]) : undefined,
  );
  const { stats } = run;
  const join = stats.latency('join');
  const relay = stats.latency('relay');
  const sent = stats.counter('transformsSent');
  const segmented = stats.counter('transformsSegmented');
  const received = stats.counter('transformsReceived');
  const foreign = stats.counter('foreignTransforms');
  const lost = stats.counter('lost');
  const expected = stats.counter('expected');
  const duplicates = stats.counter('duplicates');
  const reordered = stats.counter('reordered');
  const retries = stats.counter('retries');
  const repeats = stats.counter('repeats');
  const origin = performance.now();
  const period = 1000 / o.tickRate;
  const segmentWriter = new WireWriter({ initialCapacity: 256 });

  const session = async (client: LoadClient): Promise<void> => {
    const transport = o.transport === 'mixed' ? (client.slot % 2 === 0 ? 'udp' : 'tcp') : o.transport;
    const instanceId = slotInstance[client.slot]!;
    const started = performance.now();
    const c = new NoxRelayClient({
      host: target.host,
      port: target.port,
      transport,
      requestTimeoutMs: transport === 'udp' ? 2000 : 5000,
      proveAddress: o.proveAddress,
      ...(client.localAddress === undefined ? {} : { localAddress: client.localAddress }),
    });
    const trackers = new Map<number, SequenceTracker>();
    let fail: ((err: Error) => void) | undefined;
    let failedEarly: Error | undefined;
    const failWith = (err: Error) => {
      if (fail !== undefined) fail(err);
      else failedEarly ??= err;
    };
    c.on('error', (err: Error) => {
      // A packet that does not decode: the relay sent something no client can read. Socket
      // errors (a reset while leaving, an ICMP unreachable) are the connection's, counted only.
      if (err instanceof DecodeError) stats.violation('malformed_packet', err.message);
      else stats.error(codeOf(err), err.message);
    });
    c.on('disconnect', (reason: string | null) =>
      failWith(
        new NoxRelayClientError('ERR_NOX_DISCONNECTED', `the relay disconnected the player: ${reason ?? ''}`),
      ),
    );
    c.on('close', () =>
      failWith(new NoxRelayClientError('ERR_NOX_CLOSED', 'the relay closed the connection')),
    );
    c.on('transform', (m: Transform) => {
      const v = m.velocity;
      const p = m.position;
      if (v === undefined || p === undefined || m.transformType !== TransformType.OnPlayer) {
        foreign.add();
        return;
      }
      const seq = v.x;
      const sender = v.z;
      const r = m.rotation;
      // Every field is checked: the velocity's check value, the position's own check, and the
      // rotation recomputed from the sequence number (float32 values, exact both ways). Object.is,
      // not ===: a flipped sign bit turns 0 into -0, which === takes for 0.
      if (
        !Number.isInteger(seq) ||
        !Number.isInteger(sender) ||
        !Object.is(v.y, transformCheck(seq, sender, p.x, p.y)) ||
        !Object.is(p.z, positionCheck(p.x, p.y)) ||
        r === undefined ||
        !Object.is(r.x, 0) ||
        !Object.is(r.z, 0) ||
        !Object.is(r.y, Math.fround(Math.sin(angle(seq) / 2))) ||
        !Object.is(r.w, Math.fround(Math.cos(angle(seq) / 2)))
      ) {
        stats.violation(
          'corrupt_transform',
          `player ${m.playerId}: position ${p.x},${p.y},${p.z} velocity ${v.x},${v.y},${v.z}`,
        );
        return;
      }
      let t = trackers.get(sender);
      if (t === undefined) {
        t = new SequenceTracker();
        trackers.set(sender, t);
      }
      if (seq === t.latest) {
        // The current state again: the relay sends a newcomer the stored transforms of everyone
        // it is introduced to, and then the update it was holding back (tps) goes to everyone.
        // A transform is state, not an event: receiving the latest one twice changes nothing.
        repeats.add();
        return;
      }
      if (!t.see(seq)) {
        // An older transform again: UDP may deliver a datagram twice (the network's doing);
        // over TCP it is the relay's, and it would move the avatar back.
        if (transport === 'tcp') stats.violation('duplicate_transform', `from session ${sender}, #${seq}`);
        return;
      }
      received.add();
      const sentUs = p.x * 1_000_000 + p.y;
      relay.record(((performance.now() - origin) * 1000 - sentUs) / 1000);
    });
    const leaveEarly = () => {
      if (!c.isClosed) void c.close();
    };
    client.signal.addEventListener('abort', leaveEarly, { once: true });
    let ticker: NodeJS.Timeout | undefined;
    let segmentId = 0;
    let countedIn = 0;
    let countedOut = 0;
    const countBytes = () => {
      stats.bytesIn.add(c.bytesReceived - countedIn);
      stats.bytesOut.add(c.bytesSent - countedOut);
      countedIn = c.bytesReceived;
      countedOut = c.bytesSent;
    };
    try {
      // Over UDP a request or its reply can be lost: a step unanswered within 2 s is asked again,
      // up to five times, as a player would retry (TCP delivers or fails the connection).
      const attempts = transport === 'udp' ? 5 : 1;
      let attempt = 0;
      const retry = async <T>(step: () => Promise<T>): Promise<T> => {
        for (attempt = 1; ; attempt++) {
          try {
            return await step();
          } catch (err) {
            if (attempt >= attempts || codeOf(err) !== 'ERR_NOX_TIMEOUT' || client.signal.aborted) throw err;
            retries.add();
          }
        }
      };
      client.step(`connect to ${c.target}`);
      await c.connect();
      client.step(`Handshake with ${c.target}`);
      await retry(() => c.handshake('node', 'gamewire-load'));
      client.step('Authentification');
      const auth = await retry(() => c.authenticate(`${o.tokenPrefix}${client.index}`));
      if (auth.result !== 0)
        throw new NoxRelayClientError('ERR_NOX_AUTH', `authentification answered result ${auth.result}`);
      client.step(`Enter instance ${instanceId}`);
      const enter = await retry(() => c.enter(instanceId, { asBot: o.asBot }));
      // Enter answered Unknown "already in an instance" after a retry, or to a copy the network
      // delivered twice: this client had entered nowhere, so an earlier copy of this same Enter
      // got in and only its reply was lost or overtaken.
      const enteredBefore =
        enter.result === EnterResult.Unknown && (attempt > 1 || /already in/i.test(enter.reason ?? ''));
      if (enter.result !== EnterResult.Success && !enteredBefore)
        throw new NoxRelayClientError(
          'ERR_NOX_ENTER',
          `enter instance ${instanceId} answered result ${enter.result} ${enter.reason ?? ''}`.trim() +
            (enter.result === EnterResult.Full
              ? ": fewer --clients, or --instances over more of the relay's instances (leave --instances out to spread over every public one)"
              : ''),
        );
      client.step(`Traveling in instance ${instanceId}`);
      await retry(() => c.travel(instanceId));
      client.signal.removeEventListener('abort', leaveEarly);
      if (client.signal.aborted) return;
      join.record(performance.now() - started);
      client.joined();
      let seq = 0;
      const tick = () => {
        if (c.isClosed) return;
        countBytes();
        const us = Math.round((performance.now() - origin) * 1000);
        const secs = Math.floor(us / 1_000_000);
        const micros = us - secs * 1_000_000;
        const a = angle(seq);
        const message: Extract<ClientMessage, { type: 'Transform' }> = {
          type: 'Transform',
          instanceId,
          transformType: TransformType.OnPlayer,
          playerId: 0xffff,
          rig: RIG,
          flags: FLAGS,
          position: { x: secs, y: micros, z: positionCheck(secs, micros) },
          rotation: { x: 0, y: Math.sin(a / 2), z: 0, w: Math.cos(a / 2) },
          velocity: { x: seq, y: transformCheck(seq, client.index, secs, micros), z: client.index },
        };
        seq++;
        sent.add();
        if (o.segmentShare > 0 && Math.random() < o.segmentShare) {
          // The whole packet, cut into pieces the relay puts back together.
          const w = segmentWriter.reset();
          writeClientPacket(w, 0, message);
          const whole = w.toBuffer();
          const n = Math.min(o.segments, whole.length);
          const size = Math.ceil(whole.length / n);
          const id = segmentId;
          segmentId = (segmentId + 1) & 0xffff;
          for (let i = 0; i < n; i++) {
            c.post({
              type: 'Segmentation',
              segmentId: id,
              totalSegments: n,
              currentSegment: i,
              segmentData: whole.subarray(i * size, Math.min(whole.length, (i + 1) * size)),
            });
          }
          segmented.add();
        } else c.post(message);
      };
      // Players tick out of phase, as real ones do.
      ticker = setTimeout(() => {
        tick();
        ticker = setInterval(tick, period);
      }, Math.random() * period);
      await untilStopped(client.signal, (reject) => {
        fail = reject;
        if (failedEarly !== undefined) reject(failedEarly);
      });
    } finally {
      clearTimeout(ticker);
      clearInterval(ticker);
      client.signal.removeEventListener('abort', leaveEarly);
      for (const t of trackers.values()) {
        lost.add(t.lost);
        expected.add(t.expected);
        duplicates.add(t.duplicates);
        reordered.add(t.reordered);
      }
      await c.disconnect('load done').catch(() => {});
      countBytes();
    }
  };

  return {
    session,
    report: () => ({
      relayLossPercent: expected.n === 0 ? 0 : Math.round((lost.n / expected.n) * 1e6) / 1e4,
    }),
  };
}

export const noxRelayLoad: LoadDefinition = {
  summary: 'players over UDP or TCP entering instances and sending transforms at a tick rate',
  clientNoun: 'player',
  defaultPort: DEFAULT_PORT,
  options: [
    {
      flag: '--transport <t>',
      key: 'transport',
      description: 'udp, tcp, or mixed (every other player on TCP)',
      type: 'string',
      choices: ['udp', 'tcp', 'mixed'],
      default: 'udp',
    },
    {
      flag: '--instances <ids>',
      key: 'instances',
      description:
        'instances to enter, players spread over them in turn (0,1 or 0-7); default: every public instance the relay lists, by the room each has',
      type: 'list',
    },
    {
      flag: '--tick-rate <hz>',
      key: 'tickRate',
      description:
        "transforms per second per player (keep it under half the instance's tps, 24 by default: the relay merges updates closer than 1/tps, which shows as loss)",
      type: 'number',
      min: 0.1,
      max: 1000,
      default: 10,
    },
    {
      flag: '--token-prefix <text>',
      key: 'tokenPrefix',
      description: 'offline tokens are this prefix and the session number',
      type: 'string',
      default: 'load-',
    },
    { flag: '--as-bot', key: 'asBot', description: 'enter as bots instead of players', type: 'bool' },
    {
      flag: '--no-prove-address',
      key: 'proveAddress',
      description: 'UDP: do not echo the address cookie (behave like the reference client, which has none)',
      type: 'bool',
    },
    {
      flag: '--segment-share <fraction>',
      key: 'segmentShare',
      description: 'share of transforms sent as Segmentation packets (0..1)',
      type: 'number',
      min: 0,
      max: 1,
      default: 0,
    },
    {
      flag: '--segments <n>',
      key: 'segments',
      description: 'pieces a segmented transform is cut into',
      type: 'int',
      min: 2,
      max: 32,
      default: 3,
    },
  ],
  progress: { rates: ['transformsReceived'], latencies: ['relay'] },
  prepare,
};
