/**
 * Where the server gets its pre-framed responses: the master index and every archive index are
 * framed once at start; groups are read from the store, stripped of their version trailer,
 * framed, and kept in a byte-bounded LRU cache (or all framed up front with `preload`, refused
 * beyond a byte budget). Frames are shared by every connection and never modified.
 */
import { decodeContainer, splitTrailer } from './cache/container.js';
import { readIndex } from './cache/js5-index.js';
import { createMasterIndex, type MasterIndexFormat, masterIndexContainer } from './cache/master-index.js';
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
  /** Every key that the indexes list (wire-addressable groups only) plus 255/x and 255/255. */
  private readonly valid = new Set<number>();
  readonly stats = { hits: 0, misses: 0, evictions: 0, readErrors: 0 };
  /** Total bytes of every framed group listed by the indexes (known after start). */
  groups = 0;
  /** The archives the master index lists, with their CRC, version and group count (the dashboard). */
  readonly archives: { id: number; crc: number; version: number; groups: number }[] = [];

  constructor(store: Store, options: ResponseSourceOptions) {
    this.store = store;
    this.options = options;
    const master = createMasterIndex(store, options.masterIndexFormat);
    this.pinned.set(requestKey(255, 255), frameResponse(255, 255, masterIndexContainer(master)));
    this.valid.add(requestKey(255, 255));
    master.entries.forEach((entry, archive) => {
      if (entry.checksum === 0 && entry.version === 0) return;
      const stored = store.read(255, archive);
      if (stored === undefined) return;
      this.pinned.set(requestKey(255, archive), frameResponse(255, archive, stored));
      this.valid.add(requestKey(255, archive));
      const index = readIndex(decodeContainer(stored, 'none').data);
      let groups = 0;
      for (const g of index.groups) {
        if (g.id > 0xffff) continue;
        this.valid.add(requestKey(archive, g.id));
        this.groups++;
        groups++;
      }
      this.archives.push({ id: archive, crc: entry.checksum, version: entry.version, groups });
    });
    if (options.preload) this.preloadAll();
  }

  private preloadAll(): void {
    let total = 0;
    for (const key of this.valid) {
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

  /** True if the indexes list the group (the only groups the server will answer). */
  has(key: number): boolean {
    return this.valid.has(key);
  }

  private load(key: number): Buffer | undefined {
    const archive = Math.floor(key / 65536);
    const group = key % 65536;
    try {
      // Read into a reused scratch buffer: the only allocation per miss is the frame itself.
      const stored = this.store.read(archive, group, this.scratch);
      if (stored === undefined) return undefined;
      // Grow only when the scratch was too small for the store to use: a store that ignores
      // `into` for small groups must not cost a new scratch on every miss.
      if (
        stored.buffer !== this.scratch.buffer &&
        stored.length > this.scratch.length &&
        stored.length <= MAX_SCRATCH
      )
        this.scratch = Buffer.allocUnsafe(Math.min(MAX_SCRATCH, stored.length * 2));
      const { container } = splitTrailer(stored);
      return frameResponse(archive, group, container);
    } catch {
      this.stats.readErrors++;
      return undefined;
    }
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
    if (!this.valid.has(key)) return undefined;
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
