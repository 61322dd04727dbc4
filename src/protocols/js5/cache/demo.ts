/**
 * Synthetic caches: the demo cache (`gamewire js5 cache create-demo`, and what `npm start`
 * serves) and the large cache the bench serves. Deterministic: the same options give the same
 * bytes.
 */

import { CacheWriter } from './cache.js';
import type { CompressionName } from './container.js';
import { packGroup } from './group.js';
import { IndexFlags, nameHash } from './js5-index.js';
import { createStore, type Store } from './store.js';

/** The client families a demo cache can be laid out for (the server's profiles). */
export type DemoProfile = '435' | '530' | 'osrs';

/**
 * Archives each client family creates at start, so the master index must have an entry (a real
 * index, no (0, 0) hole) for each:
 * - 435: archives 0–12 (its cache has idx0–idx12);
 * - 530: archives 0–27 (the client builds 28 Js5 archives in `createJs5` and fails on fewer);
 * - osrs: 26 (0–25). Old School clients read the entry of every archive they create at
 *   `5 + 8 × archive` with no bounds check; 26 covers every archive of the revisions the osrs
 *   profile targets, and entries a client does not create are never read.
 */
export const DEMO_ARCHIVES: Readonly<Record<DemoProfile, number>> = { '435': 13, '530': 28, osrs: 26 };

/** mulberry32: a small deterministic PRNG. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Bytes that compress somewhat (runs and a small alphabet), like real cache data. */
function payload(rand: () => number, size: number): Buffer {
  const out = Buffer.allocUnsafe(size);
  let i = 0;
  while (i < size) {
    const run = 1 + Math.floor(rand() * 12);
    const b = rand() < 0.3 ? 0 : Math.floor(rand() * 64);
    const end = Math.min(size, i + run);
    out.fill(b, i, end);
    i = end;
  }
  return out;
}

/** Data size that makes a container of exactly `containerSize` bytes with no compression. */
function rawFor(containerSize: number): number {
  return containerSize - 5;
}

export interface DemoOptions {
  kind?: 'disk' | 'flat';
  seed?: number;
  /** Client family to lay the archives out for (default 530, what `npm start` serves). */
  profile?: DemoProfile;
}

export interface DemoSummary {
  dir: string;
  kind: 'disk' | 'flat';
  profile?: DemoProfile;
  archives: number;
  groups: number;
  /**
   * Bytes of the groups as stored (containers plus their 2-byte version trailers, archives
   * 0–254; indexes not counted): the same measure as `verify`, `info` and `download`.
   */
  storedBytes: number;
  /** Bytes of the groups' data once decompressed. */
  unpackedBytes: number;
}

/**
 * Builds the demo cache in `dir` for a client family: every archive that family creates has an
 * index (no holes). Archives 0–4 and 6 hold the test content: index protocols 5 and 6 with and
 * without names, group sizes from a few bytes to ~600 KB including every 512-byte marker
 * boundary, compression none/gzip/bzip2, multi-file groups, sparse ids up to 65535. The other
 * archives hold a few small named groups each. For 435 every index is protocol 5 (the format of
 * that era, with no version field).
 */
export function createDemoCache(dir: string, options: DemoOptions = {}): DemoSummary {
  const kind = options.kind ?? 'disk';
  const profile = options.profile ?? '530';
  const archives = DEMO_ARCHIVES[profile];
  const proto = (p: 5 | 6): 5 | 6 => (profile === '435' ? 5 : p);
  const rand = prng(options.seed ?? 530);
  const store = createStore(dir, kind);
  const w = new CacheWriter(store);
  let groups = 0;
  let storedBytes = 0;
  let unpackedBytes = 0;
  const put = (archive: number, group: number, size: number, compression: CompressionName, name?: string) => {
    const data = payload(rand, size);
    w.putGroup(archive, group, data, {
      compression,
      ...(name === undefined ? {} : { nameHash: nameHash(name) }),
    });
    groups++;
    unpackedBytes += size;
  };
  try {
    // 0: many small groups, named.
    w.index(0, { protocol: proto(6), flags: IndexFlags.names });
    for (let g = 0; g < 60; g++)
      put(0, g, 20 + Math.floor(rand() * 2000), g % 3 === 0 ? 'gzip' : 'none', `demo_${g}`);
    // 1: containers exactly on the marker boundaries, then a few compressed ones.
    w.index(1, { protocol: proto(6) });
    const boundaries = [509, 510, 1020, 1021, 1531, 1532, 511, 512, 1023, 1024, 2043, 2044];
    boundaries.forEach((c, g) => {
      put(1, g, rawFor(c), 'none');
    });
    for (let g = boundaries.length; g < boundaries.length + 8; g++)
      put(1, g, 400 + Math.floor(rand() * 3000), 'bzip2');
    // 2: medium groups, mixed compression.
    w.index(2, { protocol: proto(6), flags: IndexFlags.names });
    for (let g = 0; g < 40; g++) {
      const size = 2000 + Math.floor(rand() * 60_000);
      const c: CompressionName = g % 4 === 1 && size < 20_000 ? 'bzip2' : g % 2 === 0 ? 'gzip' : 'none';
      put(2, g, size, c, `mid_${g}`);
    }
    // 5 more groups in archive 2 hold 3 files each (striped multi-file groups).
    for (let g = 40; g < 45; g++) {
      const files = [0, 1, 2].map(() => payload(rand, 100 + Math.floor(rand() * 3000)));
      const packed = packGroup(files);
      w.putGroup(2, g, packed, {
        compression: 'gzip',
        files: [0, 4, 9],
        nameHash: nameHash(`multi_${g}`),
      });
      groups++;
      unpackedBytes += packed.length;
    }
    // 3: protocol 5 (ORIGINAL) index.
    w.index(3, { protocol: 5 });
    for (let g = 0; g < 10; g++) put(3, g, 100 + Math.floor(rand() * 5000), g % 2 === 0 ? 'none' : 'gzip');
    // 4: large groups (several hundred KB): what slicing is for.
    w.index(4, { protocol: proto(6) });
    for (let g = 0; g < 6; g++)
      put(4, g, 150_000 + Math.floor(rand() * 450_000), g % 2 === 0 ? 'none' : 'gzip');
    // 6: sparse group ids up to the wire's u16 limit. Clients size their per-group arrays by the
    // largest id, so the 530 client spends about 1.5 s parsing this index.
    w.index(6, { protocol: proto(6), flags: IndexFlags.names });
    for (const g of [0, 7, 300, 4096, 65_535])
      put(6, g, 64 + Math.floor(rand() * 700), 'gzip', `sparse_${g}`);
    // 5 and 7…: small named groups, so every archive the client creates has a real index.
    for (let a = 5; a < archives; a++) {
      if (a === 6) continue;
      w.index(a, { protocol: proto(6), flags: IndexFlags.names });
      for (let g = 0; g < 3; g++)
        put(a, g, 32 + Math.floor(rand() * 400), g === 1 ? 'gzip' : 'none', `archive${a}_${g}`);
    }
    w.flush();
    storedBytes = w.storedBytes;
  } finally {
    store.close();
  }
  return { dir, kind, profile, archives, groups, storedBytes, unpackedBytes };
}

/**
 * A large synthetic cache for the bench: `totalBytes` of groups with sizes from 100 B to
 * 512 KB (log-uniform), mostly stored uncompressed so generation stays fast.
 */
export function createSyntheticCache(dir: string, totalBytes: number, seed = 1): DemoSummary {
  const rand = prng(seed);
  const store: Store = createStore(dir, 'disk');
  const w = new CacheWriter(store);
  let groups = 0;
  let storedBytes = 0;
  let unpackedBytes = 0;
  const pool = payload(rand, 1 << 20);
  try {
    for (let archive = 0; archive < 8 && unpackedBytes < totalBytes; archive++) {
      w.index(archive, { protocol: 6 });
      for (let g = 0; g < 4000 && unpackedBytes < totalBytes; g++) {
        const size = Math.floor(Math.exp(Math.log(100) + rand() * (Math.log(512 * 1024) - Math.log(100))));
        const start = Math.floor(rand() * (pool.length - size));
        const data = pool.subarray(start, start + size);
        w.putGroup(archive, g, data, { compression: g % 16 === 0 && size < 64 * 1024 ? 'gzip' : 'none' });
        groups++;
        unpackedBytes += size;
      }
    }
    w.flush();
    storedBytes = w.storedBytes;
  } finally {
    store.close();
  }
  return { dir, kind: 'disk', archives: 8, groups, storedBytes, unpackedBytes };
}
