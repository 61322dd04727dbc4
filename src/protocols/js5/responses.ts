/**
 * Where the server gets its pre-framed responses: the master index and every archive index are
 * framed once at start; groups are read from the store, checked against their index's CRC,
 * stripped of their version trailer, framed, and kept in a byte-bounded LRU cache (or all framed
 * up front with `preload`, refused beyond a byte budget). Frames are shared by every connection
 * and never modified.
 *
 * A damaged cache still serves: an index that does not decode and a group that cannot be read or
 * fails its CRC are answered as missing (docs/js5.md, "A damaged cache"), each recorded once in
 * `problems` and reported through `onProblem`.
 */

import { splitTrailer } from './cache/container.js';
import { crc32 } from './cache/crc.js';
import { type MasterIndexFormat, masterIndexContainer, masterIndexFrom } from './cache/master-index.js';
import { type CacheProblem, problemOf, readIndexStates } from './cache/scan.js';
import type { Store } from './cache/store.js';
import { Js5Error } from './errors.js';
import { frameResponse } from './framing.js';

/** Largest scratch buffer kept for store reads. */
const MAX_SCRATCH = 4 * 1024 * 1024;

/** (archive << 16) | group: a request key as it travels on the wire. */
export function requestKey(archive: number, group: number): number {
  return archive * 65536 + group;
}

export interface ResponseSourceOptions {
  masterIndexFormat: MasterIndexFormat;
  /** Byte budget of the LRU cache of framed groups. */
  cacheBytes: number;
  /** Frame every group at start (memory then holds the whole cache, up to `preloadMaxBytes`). */
  preload: boolean;
  preloadMaxBytes: number;
}

export class ResponseSource {
  private readonly store: Store;
  private readonly pinned = new Map<number, Buffer>();
  private readonly lru = new Map<number, Buffer>();
  private lruBytes = 0;
  private scratch = Buffer.allocUnsafe(64 * 1024);
  private readonly options: ResponseSourceOptions;
  /**
   * Every key the indexes list (wire-addressable groups only), with the CRC its container must
   * have; 255/x and 255/255 too (their CRC is not checked: they are pinned).
   */
  private readonly valid = new Map<number, number>();
  /** Bad indexes and groups found so far, by key: answered as missing from then on. */
  private readonly bad = new Map<number, CacheProblem>();
  /**
   * Groups whose CRC has been checked once: later misses (the LRU evicted them) skip the check,
   * so a working set larger than the LRU costs one CRC per group, not one per request.
   */
  private readonly checked = new Set<number>();
  readonly stats = { hits: 0, misses: 0, evictions: 0, readErrors: 0 };
  /** Total bytes of every framed group listed by the indexes (known after start). */
  groups = 0;
  /** The archives the master index lists, with their CRC, version and group count (the dashboard). */
  readonly archives: { id: number; crc: number; version: number; groups: number }[] = [];
  /** Called once for each bad group found while serving (the server logs it). */
  onProblem: ((problem: CacheProblem) => void) | undefined;

  constructor(store: Store, options: ResponseSourceOptions) {
    this.store = store;
    this.options = options;
    const { states, problems } = readIndexStates(store);
    for (const p of problems) this.bad.set(requestKey(p.archive, p.group), p);
    const master = masterIndexFrom(states, options.masterIndexFormat);
    this.pinned.set(requestKey(255, 255), frameResponse(255, 255, masterIndexContainer(master)));
    this.valid.set(requestKey(255, 255), 0);
    for (const { archive, stored, index } of states) {
      const entry = master.entries[archive];
      if (entry === undefined || stored === undefined) continue;
      if (index === undefined) {
        // Listed in the master index (by the CRC of its stored bytes) but answered as missing:
        // a client could not decode it, and nothing says which of its groups exist.
        this.archives.push({ id: archive, crc: entry.checksum, version: entry.version, groups: 0 });
        continue;
      }
      this.pinned.set(requestKey(255, archive), frameResponse(255, archive, stored));
      this.valid.set(requestKey(255, archive), 0);
      let groups = 0;
      for (const g of index.groups) {
        if (g.id > 0xffff) continue;
        this.valid.set(requestKey(archive, g.id), g.checksum);
        this.groups++;
        groups++;
      }
      this.archives.push({ id: archive, crc: entry.checksum, version: entry.version, groups });
    }
    if (options.preload) this.preloadAll();
  }

  /** Bad indexes and groups found so far (at start: the indexes, and every group with `preload`). */
  get problems(): CacheProblem[] {
    return [...this.bad.values()];
  }

  private preloadAll(): void {
    let total = 0;
    for (const key of this.valid.keys()) {
      if (this.pinned.has(key)) continue;
      const framed = this.load(key);
      if (framed === undefined) continue;
      total += framed.length;
      if (total > this.options.preloadMaxBytes) {
        throw new Js5Error(
          'ERR_JS5_PRELOAD_TOO_LARGE',
          `preloading needs more than ${this.options.preloadMaxBytes} bytes; raise --js5-preload-max-mb or drop --preload`,
        );
      }
      this.pinned.set(key, framed);
    }
  }

  /** True if the indexes list the group and it is not known to be bad (the only groups answered). */
  has(key: number): boolean {
    return this.valid.has(key) && !this.bad.has(key);
  }

  /** Why the group is answered as missing, if it is known to be bad. */
  problem(key: number): CacheProblem | undefined {
    return this.bad.get(key);
  }

  private load(key: number): Buffer | undefined {
    const archive = Math.floor(key / 65536);
    const group = key % 65536;
    let stored: Buffer | undefined;
    try {
      // Read into a reused scratch buffer: the only allocation per miss is the frame itself.
      stored = this.store.read(archive, group, this.scratch);
    } catch (e) {
      return this.fail(problemOf(archive, group, e));
    }
    if (stored === undefined) {
      return this.fail({
        archive,
        group,
        code: 'ERR_JS5_MISSING',
        message: 'listed in the index, absent from the store',
      });
    }
    // Grow only when the scratch was too small for the store to use: a store that ignores
    // `into` for small groups must not cost a new scratch on every miss.
    if (
      stored.buffer !== this.scratch.buffer &&
      stored.length > this.scratch.length &&
      stored.length <= MAX_SCRATCH
    )
      this.scratch = Buffer.allocUnsafe(Math.min(MAX_SCRATCH, stored.length * 2));
    // What the client checks before using a group: a readable container with the index's CRC.
    let container: Buffer;
    try {
      container = splitTrailer(stored).container;
    } catch (e) {
      return this.fail(problemOf(archive, group, e));
    }
    if (!this.checked.has(key)) {
      const crc = crc32(container);
      const expected = this.valid.get(key);
      if (crc !== expected) {
        return this.fail({ archive, group, code: 'ERR_JS5_CRC', message: `crc ${crc} != index ${expected}` });
      }
      this.checked.add(key);
    }
    return frameResponse(archive, group, container);
  }

  private fail(problem: CacheProblem): undefined {
    this.stats.readErrors++;
    const key = requestKey(problem.archive, problem.group);
    if (!this.bad.has(key)) {
      this.bad.set(key, problem);
      this.onProblem?.(problem);
    }
    return undefined;
  }

  /** The framed response for `key` (urgent form, no 0x80), or undefined if missing/corrupt. */
  get(key: number): Buffer | undefined {
    const p = this.pinned.get(key);
    if (p !== undefined) return p;
    const hit = this.lru.get(key);
    if (hit !== undefined) {
      this.stats.hits++;
      this.lru.delete(key);
      this.lru.set(key, hit);
      return hit;
    }
    this.stats.misses++;
    if (!this.has(key)) return undefined;
    const framed = this.load(key);
    if (framed === undefined) return undefined;
    if (framed.length <= this.options.cacheBytes / 4) {
      this.lru.set(key, framed);
      this.lruBytes += framed.length;
      while (this.lruBytes > this.options.cacheBytes) {
        const [k, v] = this.lru.entries().next().value as [number, Buffer];
        this.lru.delete(k);
        this.lruBytes -= v.length;
        this.stats.evictions++;
      }
    }
    return framed;
  }

  get cachedBytes(): number {
    return this.lruBytes;
  }
}
