/**
 * Allocation state shared by the relay (UDP) and the allocation API (HTTP): allocations, their
 * keys and connection data, join codes, bindings and links. No I/O here.
 *
 * Connection data format (gamewire's own; Unity documents it only as "opaque", spec §2.3), 255
 * bytes, declared below as `ConnectionDataV2`:
 *
 *   0   4  magic `47 57 52 02` ("GWR", format 2)
 *   4  16  allocation id (RFC-4122 bytes of the allocation GUID)
 *  20   8  creation time, ms since the epoch, big-endian
 *  28   8  bind deadline: a relay node accepts the first BIND until then, ms since the epoch
 *  36   1  role: 0 host (POST /v1/allocate), 1 client (POST /v1/join)
 *  37   2  max connections (hosts), big-endian
 *  39  16  the host's allocation id (clients; zeros for hosts)
 *  55   1  length of the node id
 *  56  64  node id (ASCII, zero-padded): the relay node the allocation was placed on
 * 120 103  random filler
 * 223  32  HMAC-SHA256 over bytes 0..223, keyed with a key derived from the relay secret
 *
 * The MAC lets any relay node of a fleet that shares the secret recognise connection data the
 * fleet issued and learn everything it needs about the allocation from it, with no store lookup;
 * the allocation key is derived from the same secret and the allocation id (`RelayCredentials`).
 * Format 1 (no deadline, host or node; a per-process random secret) is gone: connection data never
 * outlives the process or fleet secret that issued it, so nothing in the field carries it.
 */
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { ConfigError } from '../../core/errors.js';
import { bytes, constant, decode, doc, encode, type Infer, struct, t } from '../../wire/codec.js';
import { StoreFullError } from './errors.js';
import { type RelayLink, UnbindReason } from './links.js';
import { ALLOCATION_ID_LENGTH, CONNECTION_DATA_LENGTH, HMAC_KEY_LENGTH } from './messages.js';

export const CONNECTION_DATA_MAGIC = 0x47575202;
const MAC_OFFSET = 223;
export const MAX_NODE_ID_LENGTH = 64;

export const ConnectionDataV2 = struct({
  magic: constant(t.u32be, CONNECTION_DATA_MAGIC),
  allocationId: bytes(ALLOCATION_ID_LENGTH),
  createdAt: doc('ms since the epoch', t.u64be),
  bindBy: doc('first BIND accepted until then, ms since the epoch', t.u64be),
  role: doc('0 host, 1 client', t.u8),
  maxConnections: t.u16be,
  hostAllocationId: doc("clients: the host's allocation id; zeros for hosts", bytes(ALLOCATION_ID_LENGTH)),
  nodeIdLength: t.u8,
  nodeId: doc('the relay node it was placed on, ASCII, zero-padded', bytes(MAX_NODE_ID_LENGTH)),
  filler: doc('random', bytes(103)),
  mac: doc('HMAC-SHA256(key derived from the relay secret, bytes 0..223)', bytes(32)),
});
export type ConnectionDataFields = Infer<typeof ConnectionDataV2>;

/** What connection data says about its allocation. */
export interface IssuedAllocation {
  id: Buffer;
  createdAt: number;
  bindBy: number;
  role: Role;
  maxConnections: number;
  /** Clients: the host's allocation id. */
  hostId: Buffer | undefined;
  nodeId: string;
}

/** Node ids: what `--node-id` accepts (they travel in connection data and Redis keys). */
export function checkNodeId(id: string, key = 'unity-relay.nodeId'): string {
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(id))
    throw new ConfigError(`node id "${id}": use 1 to 64 of A-Z a-z 0-9 . _ -`, key);
  return id;
}

/**
 * The fleet's shared relay secret and what is derived from it: the connection-data MAC key and
 * each allocation's 64-byte key, HKDF-SHA256(secret, salt = allocation id, info = label). The
 * allocator derives the key to put it in the allocation JSON; a relay node derives the same key
 * to check BIND HMACs, so neither needs the other (nor a store) to agree on it.
 */
export class RelayCredentials {
  private readonly macKey: Buffer;
  private readonly secret: Buffer;

  constructor(secret: Buffer) {
    if (secret.length < 16) throw new ConfigError('the relay secret must be at least 16 bytes');
    this.secret = Buffer.from(secret);
    this.macKey = Buffer.from(
      hkdfSync('sha256', this.secret, Buffer.alloc(0), 'gamewire unity-relay connection data', 32),
    );
  }

  /** A fresh random secret (one process, `--role all`). */
  static random(): RelayCredentials {
    return new RelayCredentials(randomBytes(32));
  }

  /** The allocation key of allocation `id` (16 bytes). */
  keyFor(id: Uint8Array): Buffer {
    return Buffer.from(
      hkdfSync('sha256', this.secret, id, 'gamewire unity-relay allocation key', HMAC_KEY_LENGTH),
    );
  }

  /** Encodes and signs connection data. */
  issue(a: IssuedAllocation): Buffer {
    const node = Buffer.from(a.nodeId, 'ascii');
    if (node.length > MAX_NODE_ID_LENGTH) throw new ConfigError(`node id "${a.nodeId}" is too long`);
    const nodeId = Buffer.alloc(MAX_NODE_ID_LENGTH);
    node.copy(nodeId);
    const data = encode(ConnectionDataV2, {
      allocationId: a.id,
      createdAt: BigInt(a.createdAt),
      bindBy: BigInt(a.bindBy),
      role: a.role === 'host' ? 0 : 1,
      maxConnections: a.maxConnections,
      hostAllocationId: a.hostId ?? Buffer.alloc(ALLOCATION_ID_LENGTH),
      nodeIdLength: node.length,
      nodeId,
      filler: randomBytes(103),
      mac: Buffer.alloc(32),
    });
    createHmac('sha256', this.macKey).update(data.subarray(0, MAC_OFFSET)).digest().copy(data, MAC_OFFSET);
    return data;
  }

  /** Whether the 255 bytes at `buf[offset]` are connection data this fleet issued (magic and MAC). */
  verify(buf: Buffer, offset: number): boolean {
    if (buf.length < offset + CONNECTION_DATA_LENGTH || buf.readUInt32BE(offset) !== CONNECTION_DATA_MAGIC)
      return false;
    const mac = createHmac('sha256', this.macKey)
      .update(buf.subarray(offset, offset + MAC_OFFSET))
      .digest();
    return timingSafeEqual(mac, buf.subarray(offset + MAC_OFFSET, offset + CONNECTION_DATA_LENGTH));
  }
}

/** Reads verified connection data (see `RelayCredentials.verify`). */
export function readIssued(buf: Buffer, offset: number): IssuedAllocation {
  const f = decode(ConnectionDataV2, buf.subarray(offset, offset + CONNECTION_DATA_LENGTH));
  const hostId = Buffer.from(f.hostAllocationId);
  return {
    id: Buffer.from(f.allocationId),
    createdAt: Number(f.createdAt),
    bindBy: Number(f.bindBy),
    role: f.role === 0 ? 'host' : 'client',
    maxConnections: f.maxConnections,
    hostId: f.role === 0 || hostId.every((b) => b === 0) ? undefined : hostId,
    nodeId: Buffer.from(f.nodeId).subarray(0, Math.min(f.nodeIdLength, MAX_NODE_ID_LENGTH)).toString('ascii'),
  };
}

export type Role = 'host' | 'client';
export type AllocationState = 'allocated' | 'bound' | 'expired';

export interface Allocation {
  /** 16 raw id bytes (what the relay messages carry). */
  readonly id: Buffer;
  /** The same id as a GUID string (what the HTTP API carries). */
  readonly guid: string;
  /** Map key: the first 30 bits of the id, unique among stored allocations. */
  readonly slot: number;
  /** The id as four little-endian int32 words, for allocation-free comparison. */
  readonly w0: number;
  readonly w1: number;
  readonly w2: number;
  readonly w3: number;
  readonly key: Buffer;
  readonly connectionData: Buffer;
  readonly role: Role;
  readonly region: string;
  readonly maxConnections: number;
  /** For clients: the host whose join code they used (when it lives in this store). */
  readonly host: Allocation | undefined;
  /** For clients: the host's allocation id (from the connection data on a relay node). */
  readonly hostId: Buffer | undefined;
  readonly createdAt: number;
  state: AllocationState;
  /** Where it is bound from (state `bound`): the remote address and port of its link. */
  address: string;
  port: number;
  /** The link it is bound through (state `bound`): UDP address, DTLS association or WebSocket. */
  link: RelayLink | undefined;
  /** Newest nonce accepted so far (serial-number order, see `nonceIsNewer`); -1 before the first BIND. */
  nonce: number;
  /**
   * State `bound`: last datagram from the bound address. State `allocated`: when it became unbound
   * (creation, or the CLOSE that unbound it), which starts the bind timeout. Ms, the store's clock.
   */
  lastSeen: number;
  /** When it expired (state `expired`). */
  expiredAt: number;
  /** Linked peers (hosts: accepted clients; clients: their host). */
  readonly peers: Set<Allocation>;
  /** Set once a join code has been issued for this (host) allocation. */
  joinCode: string | undefined;
  /** Who asked for it (the API client's address), for the per-address cap; '' when unknown. */
  readonly owner: string;
  /**
   * Messages and bytes the JavaScript relay handled from (`In`) and to (`Out`) this allocation,
   * for the dashboard: plain integer adds. RELAYs the native data plane forwards are not in
   * these (they never reach JavaScript); see docs/dashboard-api.md.
   */
  packetsIn: number;
  bytesIn: number;
  packetsOut: number;
  bytesOut: number;
}

export interface JoinCode {
  code: string;
  host: Allocation;
  expiresAt: number;
}

export interface Region {
  id: string;
  description: string;
}

export interface StoreOptions {
  /** Idle time before a bound allocation expires. Default 10 s. */
  idleTimeoutMs?: number;
  /** Idle time for a bound host that has no peer yet. Default 60 s. */
  hostAloneTimeoutMs?: number;
  /** Time to bind after allocating. Default 60 s. */
  bindTimeoutMs?: number;
  /** How long an expired allocation is remembered (a BIND for it then gets ERROR 4). Default 10 min. */
  tombstoneMs?: number;
  /** Join code lifetime. Default 15 min (and never past the host allocation). */
  joinCodeTtlMs?: number;
  /** Most stored allocations (live and expired). Default 10 000. */
  maxAllocations?: number;
  regions?: Region[];
  /** The relay secret (connection-data MAC, allocation keys); random by default. */
  secret?: Buffer;
  /** The same, already built (shared with an allocator in the same process). */
  credentials?: RelayCredentials;
  /** The node this store belongs to, written into connection data. Default `local`. */
  nodeId?: string;
  /**
   * A relay node of a fleet: a valid BIND for an allocation this store has never seen creates its
   * record from the connection data (placed on this node, within its bind deadline). Off for one
   * process (`--role all`), where the API creates records and an unknown id means a forgotten one.
   */
  adoptFromConnectionData?: boolean;
  now?: () => number;
}

/** Why connection data was not adopted (`AllocationStore.adopt`). */
export type AdoptRefusal = 'other_node' | 'bind_deadline_passed' | 'store_full';

export const DEFAULT_REGIONS: readonly Region[] = Object.freeze([
  { id: 'local-1', description: 'gamewire self-hosted relay' },
]);

/** The store's defaults (`gamewire serve unity-relay` declares its options with the same values). */
export const STORE_DEFAULTS = {
  idleTimeoutMs: 10_000,
  hostAloneTimeoutMs: 60_000,
  bindTimeoutMs: 60_000,
  tombstoneMs: 600_000,
  joinCodeTtlMs: 900_000,
  maxAllocations: 10_000,
} as const;

/** Join code alphabet: no 0/O, 1/I/L (as in Unity's 6-character codes). */
const JOIN_ALPHABET = 'ABCDEFGHJKMNPQRSTUVWXYZ23456789';

/**
 * Whether BIND nonce `nonce` is newer than `last` (the newest accepted so far, -1 for none), in
 * RFC 1982 serial-number arithmetic over u16: newer when `(nonce - last) mod 2^16` is in
 * `1 .. 2^15 - 1`. So the client's wrap from 65535 to 0 counts as an increment, while anything up
 * to 32768 steps behind (a replay of an older BIND) does not. A distance of exactly 2^15 is
 * undefined in RFC 1982 and treated as not newer.
 */
export function nonceIsNewer(nonce: number, last: number): boolean {
  if (last < 0) return true;
  const d = (nonce - last) & 0xffff;
  return d !== 0 && d < 0x8000;
}

/** Formats 16 RFC-4122 bytes as a lowercase GUID string. */
export function guidFromBytes(id: Uint8Array): string {
  const h = Buffer.from(id.buffer, id.byteOffset, id.byteLength).toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * Told of every change to who is bound where and who may relay to whom, in order. The native
 * data plane mirrors these into its forwarding table (native-dataplane.ts); the store stays the
 * source of truth.
 */
export interface AllocationObserver {
  /** `a` was bound, or bound again (maybe from another address or link). */
  bound(a: Allocation): void;
  /** `a` is no longer bound: CLOSE (`expired` false) or expiry (`expired` true). */
  unbound(a: Allocation, expired: boolean): void;
  linked(a: Allocation, b: Allocation): void;
  unlinked(a: Allocation, b: Allocation): void;
}

/** Parses a GUID string into its 16 RFC-4122 bytes, or undefined. */
export function bytesFromGuid(guid: string): Buffer | undefined {
  if (!/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(guid))
    return undefined;
  return Buffer.from(guid.replace(/-/g, ''), 'hex');
}

export class AllocationStore {
  /** Mirrors bindings and links elsewhere (the native data plane). */
  observer: AllocationObserver | undefined;
  readonly idleTimeoutMs: number;
  readonly hostAloneTimeoutMs: number;
  readonly bindTimeoutMs: number;
  readonly tombstoneMs: number;
  readonly joinCodeTtlMs: number;
  readonly maxAllocations: number;
  readonly regions: readonly Region[];
  readonly now: () => number;
  readonly credentials: RelayCredentials;
  readonly nodeId: string;
  readonly adoptFromConnectionData: boolean;
  private readonly bySlot = new Map<number, Allocation>();
  private readonly joinCodes = new Map<string, JoinCode>();
  /** Live allocations per owner (only owners with at least one). */
  private readonly byOwner = new Map<string, number>();

  constructor(options: StoreOptions = {}) {
    this.idleTimeoutMs = options.idleTimeoutMs ?? STORE_DEFAULTS.idleTimeoutMs;
    this.hostAloneTimeoutMs = options.hostAloneTimeoutMs ?? STORE_DEFAULTS.hostAloneTimeoutMs;
    this.bindTimeoutMs = options.bindTimeoutMs ?? STORE_DEFAULTS.bindTimeoutMs;
    this.tombstoneMs = options.tombstoneMs ?? STORE_DEFAULTS.tombstoneMs;
    this.joinCodeTtlMs = options.joinCodeTtlMs ?? STORE_DEFAULTS.joinCodeTtlMs;
    this.maxAllocations = options.maxAllocations ?? STORE_DEFAULTS.maxAllocations;
    this.regions = options.regions ?? DEFAULT_REGIONS;
    this.credentials =
      options.credentials ??
      (options.secret !== undefined ? new RelayCredentials(options.secret) : RelayCredentials.random());
    this.nodeId = checkNodeId(options.nodeId ?? 'local');
    this.adoptFromConnectionData = options.adoptFromConnectionData ?? false;
    this.now = options.now ?? Date.now;
  }

  get size(): number {
    return this.bySlot.size;
  }

  /** Live (not expired) allocations. */
  *live(): IterableIterator<Allocation> {
    for (const a of this.bySlot.values()) if (a.state !== 'expired') yield a;
  }

  /** Creates a host allocation (POST /v1/allocate) for `owner` (the API client's address). */
  allocateHost(maxConnections: number, region: string, owner = ''): Allocation {
    return this.create('host', maxConnections, region, undefined, owner);
  }

  /** Creates a client allocation from a join code (POST /v1/join), or undefined if the code is not valid. */
  join(code: string, owner = ''): Allocation | undefined {
    const jc = this.lookupJoinCode(code);
    if (jc === undefined) return undefined;
    return this.create('client', 1, jc.host.region, jc.host, owner);
  }

  /** Live allocations created for `owner`. */
  liveOf(owner: string): number {
    return this.byOwner.get(owner) ?? 0;
  }

  /** Issues (or returns the existing) join code of a live host allocation. */
  joinCodeFor(host: Allocation): JoinCode {
    const existing = host.joinCode === undefined ? undefined : this.joinCodes.get(host.joinCode);
    if (existing !== undefined && existing.expiresAt > this.now()) return existing;
    let code: string;
    do {
      const raw = randomBytes(6);
      code = '';
      for (const b of raw) code += JOIN_ALPHABET[b % JOIN_ALPHABET.length];
    } while (this.joinCodes.has(code));
    const jc: JoinCode = { code, host, expiresAt: this.now() + this.joinCodeTtlMs };
    this.joinCodes.set(code, jc);
    host.joinCode = code;
    return jc;
  }

  /** Join codes still valid (for the dashboard). */
  *liveJoinCodes(): IterableIterator<JoinCode> {
    const now = this.now();
    for (const jc of this.joinCodes.values()) if (jc.expiresAt > now && jc.host.state !== 'expired') yield jc;
  }

  lookupJoinCode(code: string): JoinCode | undefined {
    const jc = this.joinCodes.get(code.trim().toUpperCase());
    if (jc === undefined) return undefined;
    if (jc.expiresAt <= this.now() || jc.host.state === 'expired') {
      this.joinCodes.delete(jc.code);
      return undefined;
    }
    return jc;
  }

  /** Finds an allocation by GUID string (expired ones included). */
  byGuid(guid: string): Allocation | undefined {
    const id = bytesFromGuid(guid);
    return id === undefined ? undefined : this.find(id, 0);
  }

  /**
   * Finds the allocation whose id is the 16 bytes at `buf[offset]` (expired ones included).
   * Allocation-free: one Map lookup on a small integer, then four int compares.
   */
  find(buf: Buffer, offset: number): Allocation | undefined {
    const w0 = buf.readInt32LE(offset);
    const a = this.bySlot.get(w0 & 0x3fffffff);
    if (
      a === undefined ||
      a.w0 !== w0 ||
      a.w1 !== buf.readInt32LE(offset + 4) ||
      a.w2 !== buf.readInt32LE(offset + 8) ||
      a.w3 !== buf.readInt32LE(offset + 12)
    ) {
      return undefined;
    }
    return a;
  }

  /**
   * Verifies 255 bytes of connection data (at `buf[offset]`) issued by this store and returns the
   * allocation id it names, or undefined when the data is not ours (bad magic or MAC).
   */
  verifyConnectionData(buf: Buffer, offset: number): Buffer | undefined {
    if (!this.credentials.verify(buf, offset)) return undefined;
    return buf.subarray(offset + 4, offset + 4 + ALLOCATION_ID_LENGTH);
  }

  /**
   * A relay node's first valid BIND for an allocation it has not seen: creates the record from
   * verified connection data (at `buf[offset]`), if it was placed on this node and its bind
   * deadline has not passed. Returns the allocation, or why not.
   */
  adopt(buf: Buffer, offset: number): Allocation | AdoptRefusal {
    const issued = readIssued(buf, offset);
    if (issued.nodeId !== this.nodeId) return 'other_node';
    if (this.now() > issued.bindBy) return 'bind_deadline_passed';
    try {
      return this.insert(
        issued.id,
        issued.role,
        issued.maxConnections,
        this.regions[0]!.id,
        undefined,
        issued.hostId,
        '',
        Buffer.from(buf.subarray(offset, offset + CONNECTION_DATA_LENGTH)),
        issued.createdAt,
      );
    } catch (err) {
      if (err instanceof StoreFullError) return 'store_full';
      throw err;
    }
  }

  /** Whether verified connection data names this node. */
  placedHere(buf: Buffer, offset: number): boolean {
    return readIssued(buf, offset).nodeId === this.nodeId;
  }

  /** Records a successful BIND from `address:port` (through `link`). */
  bind(a: Allocation, address: string, port: number, nonce: number, link?: RelayLink): void {
    if (a.state !== 'bound') {
      a.state = 'bound';
    }
    a.address = address;
    a.port = port;
    if (a.link !== link) {
      const old = a.link;
      a.link = link;
      link?.bound();
      // Re-homed to another link: the old one no longer carries this binding.
      if (old !== undefined && old !== link) old.unbound(UnbindReason.Rebound);
    }
    if (nonceIsNewer(nonce, a.nonce)) a.nonce = nonce;
    a.lastSeen = this.now();
    this.observer?.bound(a);
  }

  /**
   * Removes a binding (CLOSE): drops the address and the links, and puts the allocation back in the
   * allocated-but-unbound state, so a later valid BIND binds it again. The bind timeout runs from
   * now. The newest nonce is kept (a BIND after this needs a newer one). Returns the former peers.
   */
  unbind(a: Allocation, reason: string = UnbindReason.Close): Allocation[] {
    const peers = [...a.peers];
    for (const p of peers) this.unlink(a, p);
    a.state = 'allocated';
    a.address = '';
    a.port = 0;
    this.releaseLink(a, reason);
    a.lastSeen = this.now();
    this.observer?.unbound(a, false);
    return peers;
  }

  /** Forgets the binding's link and tells it (a DTLS association then closes: its lifetime is the binding's). */
  private releaseLink(a: Allocation, reason: string): void {
    const link = a.link;
    a.link = undefined;
    link?.unbound(reason);
  }

  /** Links a client to a host (after ACCEPTED). */
  link(host: Allocation, client: Allocation): void {
    host.peers.add(client);
    client.peers.add(host);
    this.observer?.linked(host, client);
  }

  unlink(a: Allocation, b: Allocation): void {
    a.peers.delete(b);
    b.peers.delete(a);
    this.observer?.unlinked(a, b);
  }

  /** Ends an allocation (idle timeout): unbinds it, drops its links, keeps a tombstone. */
  expire(a: Allocation, reason: string = UnbindReason.Idle): Allocation[] {
    const peers = [...a.peers];
    for (const p of peers) this.unlink(a, p);
    a.state = 'expired';
    this.releaseLink(a, reason);
    if (a.owner !== '') {
      const n = (this.byOwner.get(a.owner) ?? 1) - 1;
      if (n <= 0) this.byOwner.delete(a.owner);
      else this.byOwner.set(a.owner, n);
    }
    a.expiredAt = this.now();
    if (a.joinCode !== undefined) this.joinCodes.delete(a.joinCode);
    this.observer?.unbound(a, true);
    // What is remembered for tombstoneMs is only what answers a late BIND: the id. The key, the
    // connection data and the host are let go now (a store at its cap of tombstones held several
    // KiB each, with live keys), and a late BIND's HMAC is checked with a key derived again.
    if (this.bySlot.get(a.slot) === a) this.bySlot.set(a.slot, tombstoneOf(a));
    return peers;
  }

  /** Idle limit that applies to `a` right now. */
  ttlOf(a: Allocation): number {
    if (a.state === 'allocated') return this.bindTimeoutMs;
    return a.role === 'host' && a.peers.size === 0 ? this.hostAloneTimeoutMs : this.idleTimeoutMs;
  }

  /**
   * Expires idle allocations and forgets old tombstones and join codes. Calls `onExpire` with each
   * allocation that expires now and the peers it was linked to.
   */
  sweep(onExpire: (a: Allocation, peers: Allocation[], wasBound: boolean) => void): void {
    const now = this.now();
    for (const [slot, a] of this.bySlot) {
      if (a.state === 'expired') {
        if (now - a.expiredAt >= this.tombstoneMs) this.bySlot.delete(slot);
        continue;
      }
      // Bound: last datagram; allocated: creation or the CLOSE that unbound it (see `lastSeen`).
      if (now - a.lastSeen >= this.ttlOf(a)) {
        const wasBound = a.state === 'bound';
        onExpire(a, this.expire(a), wasBound);
      }
    }
    for (const [code, jc] of this.joinCodes) {
      if (jc.expiresAt <= now || jc.host.state === 'expired') this.joinCodes.delete(code);
    }
  }

  private create(
    role: Role,
    maxConnections: number,
    region: string,
    host: Allocation | undefined,
    owner: string,
  ): Allocation {
    this.makeRoom();
    let id: Buffer;
    do {
      id = newAllocationId();
    } while (this.bySlot.has(id.readInt32LE(0) & 0x3fffffff));
    const now = this.now();
    const connectionData = this.credentials.issue({
      id,
      createdAt: now,
      bindBy: now + this.bindTimeoutMs,
      role,
      maxConnections,
      hostId: host?.id,
      nodeId: this.nodeId,
    });
    return this.insert(id, role, maxConnections, region, host, host?.id, owner, connectionData, now);
  }

  private makeRoom(): void {
    if (this.bySlot.size >= this.maxAllocations) {
      // Make room from tombstones before refusing.
      for (const [slot, a] of this.bySlot) if (a.state === 'expired') this.bySlot.delete(slot);
      if (this.bySlot.size >= this.maxAllocations) throw new StoreFullError('too many allocations');
    }
  }

  private insert(
    id: Buffer,
    role: Role,
    maxConnections: number,
    region: string,
    host: Allocation | undefined,
    hostId: Buffer | undefined,
    owner: string,
    connectionData: Buffer,
    createdAt: number,
  ): Allocation {
    this.makeRoom();
    const slot = id.readInt32LE(0) & 0x3fffffff;
    // Ids are random: two live ones sharing 30 bits is rare, and the allocator cannot see this
    // node's slots, so an adopted id that collides is refused like a full store.
    if (this.bySlot.has(slot)) throw new StoreFullError('allocation slot in use');
    const now = this.now();
    const a: Allocation = {
      id,
      guid: guidFromBytes(id),
      slot,
      w0: id.readInt32LE(0),
      w1: id.readInt32LE(4),
      w2: id.readInt32LE(8),
      w3: id.readInt32LE(12),
      key: this.credentials.keyFor(id),
      connectionData,
      role,
      region,
      maxConnections,
      host,
      hostId,
      createdAt,
      state: 'allocated',
      address: '',
      port: 0,
      link: undefined,
      nonce: -1,
      lastSeen: now,
      expiredAt: 0,
      peers: new Set(),
      joinCode: undefined,
      owner,
      packetsIn: 0,
      bytesIn: 0,
      packetsOut: 0,
      bytesOut: 0,
    };
    this.bySlot.set(slot, a);
    if (owner !== '') this.byOwner.set(owner, (this.byOwner.get(owner) ?? 0) + 1);
    return a;
  }
}

const NOTHING = Buffer.alloc(0);
/** Never linked: a tombstone has no peers, and nothing links an expired allocation. */
const NO_PEERS: Set<Allocation> = new Set();

/**
 * The record kept of an expired allocation: its id (in a buffer of its own, so that it holds no
 * shared pool alive) and when it expired; nothing secret, nothing that keeps another record alive.
 */
function tombstoneOf(a: Allocation): Allocation {
  const id = Buffer.alloc(ALLOCATION_ID_LENGTH);
  a.id.copy(id);
  return {
    id,
    guid: a.guid,
    slot: a.slot,
    w0: a.w0,
    w1: a.w1,
    w2: a.w2,
    w3: a.w3,
    key: NOTHING,
    connectionData: NOTHING,
    role: a.role,
    region: a.region,
    maxConnections: a.maxConnections,
    host: undefined,
    hostId: undefined,
    createdAt: a.createdAt,
    state: 'expired',
    address: '',
    port: 0,
    link: undefined,
    nonce: a.nonce,
    lastSeen: a.lastSeen,
    expiredAt: a.expiredAt,
    peers: NO_PEERS,
    joinCode: undefined,
    owner: '',
    packetsIn: a.packetsIn,
    bytesIn: a.bytesIn,
    packetsOut: a.packetsOut,
    bytesOut: a.bytesOut,
  };
}

/** A random version-4 GUID's 16 RFC-4122 bytes. */
export function newAllocationId(): Buffer {
  const id = randomBytes(16);
  id[6] = (id[6]! & 0x0f) | 0x40; // RFC-4122 version 4
  id[8] = (id[8]! & 0x3f) | 0x80; // RFC-4122 variant
  return id;
}

/** Decodes connection data issued by gamewire (for logs and tests; does not check the MAC). */
export function describeConnectionData(data: Uint8Array): ConnectionDataFields {
  return decode(ConnectionDataV2, data);
}
