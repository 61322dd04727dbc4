/**
 * Instances and the players in them. An instance comes from the config (`instances` in the
 * config file, or `--instances FILE`); with none configured, one public default instance exists.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { InstanceFlags, type PlayerStatus } from './constants.js';
import { NoxRelayConfigError } from './errors.js';
import type { RelayClient } from './session.js';

export interface WorldConfig {
  masterId: number;
  address: string;
  version: number;
}

/** One instance as written in an instance file (every field optional but `id`). */
export interface InstanceConfig {
  /** Internal id on this relay (0..255), used by Enter. */
  id: number;
  /** Id on the master server (Sessions). Default: the internal id. */
  masterId?: number;
  name?: string;
  /** 0 = unlimited. Default 32. */
  capacity?: number;
  /** Plain text here; only a SHA-256 is kept in memory. Setting it sets UsePassword. */
  password?: string;
  /** User ids allowed in; a non-empty list sets UseWhitelist. */
  whitelist?: number[];
  /** Banned user ids: `{ userId, expiresAt (ms, 0 = permanent), reason }`. */
  blacklist?: { userId: number; expiresAt?: number; reason?: string }[];
  /** Bots may enter (AuthorizeBot). Default true. */
  bots?: boolean;
  /** Listed by Sessions (IsPublic). Default true. */
  public?: boolean;
  allowOverload?: boolean;
  /** Raw InstanceFlags, OR-ed with the booleans above. */
  flags?: number;
  /** Transform rate per player and rig (default 24) and change threshold (default 0.001). */
  tps?: number;
  threshold?: number;
  /** The world Traveling hands out. Default: master id 0, address "localhost", version 1. */
  world?: WorldConfig | null;
  /** User ids that get InstanceOwner (may use ServerConfig) and InstanceModerator. */
  owners?: number[];
  moderators?: number[];
}

export const DEFAULT_INSTANCE: InstanceConfig = {
  id: 0,
  name: 'default',
  capacity: 32,
  public: true,
  bots: true,
};

/**
 * The vectors a Transform may carry, in wire order: the flag that says it is there, its field in
 * the message, where its components sit in `StoredTransform.values` and how many there are
 * (x, y, z and, for the rotation, w). Merging, the threshold test and the relay writer walk this
 * one table.
 */
export const TRANSFORM_VECTORS = [
  { flag: 0x01, field: 'position', at: 0, size: 3 },
  { flag: 0x02, field: 'rotation', at: 3, size: 4 },
  { flag: 0x04, field: 'scale', at: 7, size: 3 },
  { flag: 0x08, field: 'velocity', at: 10, size: 3 },
  { flag: 0x10, field: 'angularVelocity', at: 13, size: 3 },
] as const;

/** The flags of every vector a Transform may carry. */
export const TRANSFORM_VECTOR_FLAGS = 0x1f;

/** The values a rig starts from and returns to on Reset: at the origin, no rotation, scale 1, still. */
export const TRANSFORM_START_VALUES: Readonly<Float64Array> = Float64Array.of(
  ...[0, 0, 0],
  ...[0, 0, 0, 1],
  ...[1, 1, 1],
  ...[0, 0, 0],
  ...[0, 0, 0],
);

export interface StoredTransform {
  rig: number;
  /** Which vectors have been received (`TRANSFORM_VECTORS` flags). */
  flags: number;
  /** Every vector's components at its `TRANSFORM_VECTORS` offset. */
  values: Float64Array;
  /** ms (performance clock) of the last relay. */
  lastSent: number;
  /** Changed since the last relay (rate-limited by the instance's TPS). */
  dirty: boolean;
}

export interface Avatar {
  avatarId: number;
  avatarServer: string;
  avatarVersion: number;
}

export class Player {
  readonly id: number;
  readonly client: RelayClient;
  readonly instance: Instance;
  status: PlayerStatus;
  flags: number;
  displayName: string;
  readonly createdAt: bigint;
  /** Players this one has been sent a Join for (and so must get a Leave for). */
  readonly known = new Set<Player>();
  avatar: Avatar | undefined = undefined;
  readonly params = new Map<number, Buffer>();
  /** Sum of the stored parameter values' lengths. */
  paramBytes = 0;
  readonly transforms = new Map<number, StoredTransform>();

  constructor(
    id: number,
    client: RelayClient,
    instance: Instance,
    flags: number,
    displayName: string,
    status: PlayerStatus,
  ) {
    this.id = id;
    this.client = client;
    this.instance = instance;
    this.flags = flags;
    this.displayName = displayName;
    this.status = status;
    this.createdAt = BigInt(Date.now());
  }
}

function hashPassword(p: string): Buffer {
  return createHash('sha256').update(p, 'utf8').digest();
}

export class Instance {
  readonly id: number;
  readonly masterId: number;
  readonly name: string;
  capacity: number;
  flags: number;
  tps: number;
  threshold: number;
  world: WorldConfig | null;
  private passwordHash: Buffer | null = null;
  readonly whitelist: Set<number>;
  readonly blacklist: Map<number, { expiresAt: number; reason: string }>;
  readonly owners: Set<number>;
  readonly moderators: Set<number>;
  readonly players = new Map<number, Player>();
  /** Members as an array, rebuilt on membership change, for the fan-out loop. */
  members: Player[] = [];
  flushTimer: NodeJS.Timeout | undefined = undefined;

  constructor(c: InstanceConfig) {
    this.id = c.id;
    this.masterId = c.masterId ?? c.id;
    this.name = c.name ?? `instance ${c.id}`;
    this.capacity = c.capacity ?? 32;
    let flags = c.flags ?? 0;
    if (c.public ?? true) flags |= InstanceFlags.IsPublic;
    if (c.bots ?? true) flags |= InstanceFlags.AuthorizeBot;
    if (c.allowOverload === true) flags |= InstanceFlags.AllowOverload;
    if ((c.whitelist?.length ?? 0) > 0) flags |= InstanceFlags.UseWhitelist;
    this.flags = flags;
    this.setPassword(c.password ?? '');
    this.tps = c.tps ?? 24;
    this.threshold = c.threshold ?? 0.001;
    this.world = c.world === undefined ? { masterId: 0, address: 'localhost', version: 1 } : c.world;
    this.whitelist = new Set(c.whitelist ?? []);
    this.blacklist = new Map(
      (c.blacklist ?? []).map((b) => [
        b.userId,
        { expiresAt: b.expiresAt ?? 0, reason: b.reason ?? 'Banned.' },
      ]),
    );
    this.owners = new Set(c.owners ?? []);
    this.moderators = new Set(c.moderators ?? []);
  }

  /** An empty password clears UsePassword, any other sets it (reference-server rule). */
  setPassword(password: string): void {
    if (password === '') {
      this.passwordHash = null;
      this.flags &= ~InstanceFlags.UsePassword;
    } else {
      this.passwordHash = hashPassword(password);
      this.flags |= InstanceFlags.UsePassword;
    }
  }

  get hasPassword(): boolean {
    return this.passwordHash !== null;
  }

  checkPassword(password: string | undefined): boolean {
    if (this.passwordHash === null) return true;
    if (password === undefined) return false;
    return timingSafeEqual(hashPassword(password), this.passwordHash);
  }

  /** Lowest free player id. */
  freeId(): number {
    let id = 0;
    while (this.players.has(id)) id++;
    return id;
  }

  add(p: Player): void {
    this.players.set(p.id, p);
    this.members = [...this.players.values()];
  }

  remove(p: Player): void {
    this.players.delete(p.id);
    this.members = [...this.players.values()];
  }
}

const BAD_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

function int(v: unknown, path: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new NoxRelayConfigError(`${path} must be an integer ${min}..${max}`);
  }
  return v;
}

/** Validates instance definitions from JSON (a config section or an instance file). */
export function parseInstances(json: unknown, where = 'instances'): InstanceConfig[] {
  const list = Array.isArray(json) ? json : (json as { instances?: unknown })?.instances;
  if (!Array.isArray(list))
    throw new NoxRelayConfigError(`${where} must be an array of instances (or { "instances": [...] })`);
  const seen = new Set<number>();
  return list.map((raw, i) => {
    const path = `${where}[${i}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      throw new NoxRelayConfigError(`${path} must be an object`);
    for (const k of Object.keys(raw))
      if (BAD_KEYS.has(k)) throw new NoxRelayConfigError(`${path}.${k} is not allowed`);
    const c = raw as InstanceConfig;
    const id = int(c.id, `${path}.id`, 0, 255);
    if (seen.has(id)) throw new NoxRelayConfigError(`${path}.id ${id} is used twice`);
    seen.add(id);
    if (c.masterId !== undefined) int(c.masterId, `${path}.masterId`, 0, 0xffffffff);
    if (c.capacity !== undefined) int(c.capacity, `${path}.capacity`, 0, 0xffff);
    if (c.tps !== undefined) int(c.tps, `${path}.tps`, 1, 255);
    if (c.flags !== undefined) int(c.flags, `${path}.flags`, 0, 0xffffffff);
    if (c.threshold !== undefined && (typeof c.threshold !== 'number' || !(c.threshold >= 0))) {
      throw new NoxRelayConfigError(`${path}.threshold must be a number >= 0`);
    }
    if (c.password !== undefined && typeof c.password !== 'string')
      throw new NoxRelayConfigError(`${path}.password must be a string`);
    for (const key of ['whitelist', 'owners', 'moderators'] as const) {
      const v = c[key];
      if (v === undefined) continue;
      if (!Array.isArray(v)) throw new NoxRelayConfigError(`${path}.${key} must be an array of user ids`);
      for (const [j, u] of v.entries()) int(u, `${path}.${key}[${j}]`, 0, 0xffffffff);
    }
    if (c.world !== undefined && c.world !== null) {
      int(c.world.masterId, `${path}.world.masterId`, 0, 0xffffffff);
      if (typeof c.world.address !== 'string')
        throw new NoxRelayConfigError(`${path}.world.address must be a string`);
      int(c.world.version, `${path}.world.version`, 0, 0xffff);
    }
    return { ...c, id };
  });
}
