/**
 * Classic Kerberos user keys without blocking the event loop.
 *
 * A user key is MD5 applied 65,000 + (pid % 1024) times to the password: about 0.1 s of CPU. On
 * the event loop that stalls every connection, PRUDP acks included, for each login; 64 logins at
 * once take seconds. So:
 *
 * - keys depend only on (password, pid % 1024), and the 1024 keys of one password are
 *   consecutive links of one MD5 chain. A cache keyed by a hash of the password and pid % 1024
 *   (a password change is another key) keeps each password's chain base (MD5^65000) and the keys
 *   asked for, least recently used out; a second account with the same password costs at most
 *   1023 rounds instead of 66,023; a known key costs a Map lookup;
 * - `warm(password)` derives all 1024 keys of a password once and pins them (16 KiB): `serve rmc`
 *   does it at start for its one server-wide password, so no login ever waits for a derivation;
 * - every MD5 round runs in a worker thread (a small pool sized from the CPU count, leaving the
 *   event loop its core) behind a bounded queue: a login that would overflow it is refused with
 *   `KeyDerivationBusyError` (TicketGranting answers RendezVous::ConnectionFailure, and the
 *   client retries) rather than queueing without end.
 */
import { createHash } from 'node:crypto';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { ConfigError } from '../../../core/errors.js';
import { GamewireError } from '../../../wire/errors.js';
import { USER_KEY_BASE_ROUNDS, USER_KEY_SPREAD } from './kerberos.js';

/** The queue of derivations is full: the caller refuses the login instead of waiting. */
export class KeyDerivationBusyError extends GamewireError {
  constructor(message: string) {
    super('ERR_KEY_DERIVATION_BUSY', message);
  }
  override get name(): string {
    return 'KeyDerivationBusyError';
  }
}

// The worker's code, evaluated as a script: the same source runs from src/ (tests) and dist/.
// It computes kerberos.ts's md5Chain and hands the result back without a copy.
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { createHash } = require('node:crypto');
parentPort.on('message', (job) => {
  const out = Buffer.alloc(job.count * 16);
  let link = Buffer.from(job.seed);
  const last = job.from + job.count - 1;
  for (let i = 1; i <= last; i++) {
    link = createHash('md5').update(link).digest();
    if (i >= job.from) link.copy(out, (i - job.from) * 16);
  }
  parentPort.postMessage({ id: job.id, out }, [out.buffer]);
});
`;

export interface Md5ChainPoolOptions {
  /** Worker threads (default: CPUs - 1, at least 1, at most 8; the event loop keeps a core). */
  workers?: number;
  /** Jobs waiting for a worker before new ones are refused (default 1024). */
  maxQueued?: number;
}

interface Job {
  id: number;
  seed: Uint8Array;
  from: number;
  count: number;
  resolve(out: Buffer): void;
  reject(err: Error): void;
}

interface Slot {
  worker: Worker;
  job: Job | undefined;
}

/** The default worker count for this machine. */
export function defaultKeyWorkers(): number {
  return Math.max(1, Math.min(8, os.availableParallelism() - 1));
}

/** Worker threads that compute md5Chain. Threads start on the first job and never hold the process open. */
export class Md5ChainPool {
  readonly size: number;
  readonly maxQueued: number;
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private queueHead = 0;
  private nextId = 1;
  private closed = false;
  /** Jobs refused because the queue was full. */
  refused = 0;
  /** Jobs finished. */
  completed = 0;

  constructor(options: Md5ChainPoolOptions = {}) {
    this.size = options.workers ?? defaultKeyWorkers();
    this.maxQueued = options.maxQueued ?? 1024;
    if (!Number.isSafeInteger(this.size) || this.size < 1)
      throw new ConfigError('workers must be >= 1', 'rmc.prudpKeyWorkers');
    if (!Number.isSafeInteger(this.maxQueued) || this.maxQueued < 0)
      throw new ConfigError('maxQueued must be >= 0', 'rmc.prudpKeyQueue');
  }

  /** Jobs waiting for a worker. */
  get queued(): number {
    return this.queue.length - this.queueHead;
  }

  /** Jobs a worker is computing now. */
  get running(): number {
    let n = 0;
    for (const s of this.slots) if (s.job !== undefined) n++;
    return n;
  }

  /** md5Chain(seed, from, count) on a worker thread. Rejects with KeyDerivationBusyError when the queue is full. */
  run(seed: Uint8Array, from: number, count: number): Promise<Buffer> {
    if (this.closed) return Promise.reject(new KeyDerivationBusyError('the key derivation pool is closed'));
    return new Promise<Buffer>((resolve, reject) => {
      const job: Job = { id: this.nextId++, seed, from, count, resolve, reject };
      const idle = this.idleSlot();
      if (idle !== undefined) {
        this.start(idle, job);
        return;
      }
      if (this.queued >= this.maxQueued) {
        this.refused++;
        reject(new KeyDerivationBusyError(`${this.queued} key derivations are already waiting`));
        return;
      }
      this.queue.push(job);
    });
  }

  private idleSlot(): Slot | undefined {
    for (const s of this.slots) if (s.job === undefined) return s;
    if (this.slots.length < this.size) return this.spawn();
    return undefined;
  }

  private spawn(): Slot {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    const slot: Slot = { worker, job: undefined };
    worker.on('message', (m: { id: number; out: Uint8Array }) => {
      const job = slot.job;
      if (job === undefined || job.id !== m.id) return;
      slot.job = undefined;
      this.completed++;
      job.resolve(Buffer.from(m.out.buffer, m.out.byteOffset, m.out.byteLength));
      this.next(slot);
    });
    const lost = (err: Error) => {
      // A worker that fails (out of memory, killed) is replaced; its job fails, the others go on.
      const i = this.slots.indexOf(slot);
      if (i < 0) return;
      this.slots.splice(i, 1);
      const job = slot.job;
      slot.job = undefined;
      job?.reject(err);
      if (!this.closed && this.queued > 0) {
        const fresh = this.spawn();
        this.next(fresh);
      }
    };
    worker.on('error', lost);
    worker.on('exit', (code) => lost(new Error(`key derivation worker exited with ${code}`)));
    this.slots.push(slot);
    return slot;
  }

  private start(slot: Slot, job: Job): void {
    slot.job = job;
    slot.worker.postMessage({ id: job.id, seed: job.seed, from: job.from, count: job.count });
  }

  private next(slot: Slot): void {
    if (this.queueHead >= this.queue.length) return;
    const job = this.queue[this.queueHead]!;
    this.queue[this.queueHead++] = undefined as unknown as Job;
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
    }
    this.start(slot, job);
  }

  /** Stops the workers; waiting and running jobs fail. */
  async close(): Promise<void> {
    this.closed = true;
    const err = new KeyDerivationBusyError('the key derivation pool is closed');
    for (let i = this.queueHead; i < this.queue.length; i++) this.queue[i]!.reject(err);
    this.queue.length = 0;
    this.queueHead = 0;
    const slots = this.slots.splice(0);
    for (const s of slots) s.job?.reject(err);
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }
}

let sharedPool: Md5ChainPool | undefined;

/**
 * The process's pool: key derivation is CPU-bound, so every server in a process shares one pool
 * sized for the machine (its threads start on first use and never hold the process open).
 */
export function sharedKeyPool(): Md5ChainPool {
  sharedPool ??= new Md5ChainPool();
  return sharedPool;
}

export interface UserKeyCacheOptions {
  /** Derived keys kept, least recently used out (default 16,384: about 2 MB). */
  maxKeys?: number;
  /** Chain bases (one per password) kept, least recently used out (default 4096). */
  maxPasswords?: number;
}

/** A bounded LRU over a Map (insertion order is use order). */
function touch<V>(map: Map<string, V>, key: string, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > max) map.delete(map.keys().next().value!);
}

/** Cached, off-loop user keys (see the file comment). */
export class UserKeyCache {
  private readonly pool: Md5ChainPool;
  private readonly maxKeys: number;
  private readonly maxPasswords: number;
  /** Password id -> all 1024 keys (warmed passwords; never evicted). */
  private readonly tables = new Map<string, Buffer>();
  private readonly warming = new Map<string, Promise<Buffer>>();
  /** Password id -> MD5^65000(password). */
  private readonly bases = new Map<string, Promise<Buffer>>();
  /** `${password id}/${pid % 1024}` -> key. */
  private readonly keys = new Map<string, Buffer>();
  private readonly inflight = new Map<string, Promise<Buffer>>();
  /** Keys answered from the cache or a warmed table. */
  hits = 0;
  /** Keys that needed a worker job. */
  misses = 0;

  constructor(pool: Md5ChainPool = sharedKeyPool(), options: UserKeyCacheOptions = {}) {
    this.pool = pool;
    this.maxKeys = options.maxKeys ?? 16_384;
    this.maxPasswords = options.maxPasswords ?? 4096;
  }

  /** Keys held (cached, excluding warmed tables). */
  get size(): number {
    return this.keys.size;
  }

  /** A password's id: a hash, so the cache holds no password. */
  private static idOf(password: string): string {
    return createHash('sha256').update(password, 'utf8').digest('base64');
  }

  /**
   * Derives all 1024 keys of `password` once (one worker job, 66,023 rounds) and keeps them:
   * every later key of that password is a lookup.
   */
  warm(password: string): Promise<void> {
    const id = UserKeyCache.idOf(password);
    if (this.tables.has(id)) return Promise.resolve();
    let p = this.warming.get(id);
    if (p === undefined) {
      p = this.pool.run(Buffer.from(password, 'utf8'), USER_KEY_BASE_ROUNDS, USER_KEY_SPREAD);
      this.warming.set(id, p);
      p.then(
        (table) => {
          this.tables.set(id, table);
          this.warming.delete(id);
        },
        () => this.warming.delete(id),
      );
    }
    return p.then(() => undefined);
  }

  /** The key of `pid` with `password`, byte for byte deriveUserKey's; never computed on the caller's thread. */
  key(pid: number, password: string): Promise<Buffer> {
    const id = UserKeyCache.idOf(password);
    const index = (pid >>> 0) % USER_KEY_SPREAD;
    const table = this.tables.get(id);
    if (table !== undefined) {
      this.hits++;
      return Promise.resolve(table.subarray(index * 16, index * 16 + 16));
    }
    const name = `${id}/${index}`;
    const known = this.keys.get(name);
    if (known !== undefined) {
      this.hits++;
      touch(this.keys, name, known, this.maxKeys);
      return Promise.resolve(known);
    }
    const pending = this.inflight.get(name);
    if (pending !== undefined) return pending;
    this.misses++;
    const p = this.derive(id, index, password).then(
      (key) => {
        this.inflight.delete(name);
        touch(this.keys, name, key, this.maxKeys);
        return key;
      },
      (err: unknown) => {
        this.inflight.delete(name);
        throw err;
      },
    );
    this.inflight.set(name, p);
    return p;
  }

  private async derive(id: string, index: number, password: string): Promise<Buffer> {
    const warming = this.warming.get(id);
    if (warming !== undefined) {
      const t = await warming;
      return Buffer.from(t.subarray(index * 16, index * 16 + 16));
    }
    const base = this.bases.get(id);
    if (base !== undefined) {
      touch(this.bases, id, base, this.maxPasswords);
      const b = await base;
      return index === 0 ? b : this.pool.run(b, index, 1);
    }
    // One job gives the base and the key: links 65000 … 65000 + index.
    const chain = this.pool.run(Buffer.from(password, 'utf8'), USER_KEY_BASE_ROUNDS, index + 1);
    const b = chain.then((c) => Buffer.from(c.subarray(0, 16)));
    b.catch(() => {
      if (this.bases.get(id) === b) this.bases.delete(id);
    });
    touch(this.bases, id, b, this.maxPasswords);
    const c = await chain;
    return Buffer.from(c.subarray(index * 16, index * 16 + 16));
  }
}
