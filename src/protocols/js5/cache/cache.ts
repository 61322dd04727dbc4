/**
 * Cache-level operations over a store: reading an archive's Js5Index, writing groups with the
 * writer semantics of OpenRS2 and the clients (version + 1, CRC of the new container, trailer), verifying every
 * group against its index, and a summary for `cache info`.
 */

import fs from 'node:fs';
import path from 'node:path';
import { Js5Error } from '../errors.js';
import { type CompressionName, decodeContainer, encodeContainer } from './container.js';
import { IndexFlags, type Js5Group, type Js5Index, readIndex, writeIndex } from './js5-index.js';
import { crc32, masterIndexFrom } from './master-index.js';
import { type CacheProblem, checkGroup, problemOf, readIndexStates } from './scan.js';
import type { Store } from './store.js';
import { whirlpool } from './whirlpool.js';

/** Reads and decodes the index of `archive` (group 255/archive), or undefined if absent. */
export function readArchiveIndex(store: Store, archive: number): Js5Index | undefined {
  const stored = store.read(255, archive);
  if (stored === undefined) return undefined;
  return readIndex(decodeContainer(stored, 'none').data);
}

/** Archives that have an index in 255, ascending (255 itself excluded). */
export function indexedArchives(store: Store): number[] {
  return store.list(255).filter((a) => a < 255);
}

export interface PutGroupOptions {
  compression?: CompressionName;
  nameHash?: number;
  /** File ids inside the group (default: one file, id 0). */
  files?: number[];
}

/** Writes groups and keeps the archives' indexes up to date; `flush` writes the indexes. */
export class CacheWriter {
  readonly store: Store;
  private readonly indexes = new Map<number, Js5Index>();
  private readonly dirty = new Set<number>();
  private readonly byId = new Map<number, Map<number, Js5Group>>();
  private readonly indexCompression: CompressionName;
  /** Bytes of groups written so far (container + trailer), indexes not counted. */
  storedBytes = 0;

  constructor(store: Store, options: { indexCompression?: CompressionName } = {}) {
    this.store = store;
    this.indexCompression = options.indexCompression ?? 'gzip';
  }

  /** The index of an archive, created with `protocol`/`flags` when the archive is new. */
  index(archive: number, create?: { protocol: 5 | 6 | 7; flags?: number }): Js5Index {
    let idx = this.indexes.get(archive);
    if (idx === undefined) {
      idx = readArchiveIndex(this.store, archive) ?? {
        protocol: create?.protocol ?? 6,
        version: 0,
        flags: create?.flags ?? 0,
        groups: [],
      };
      this.indexes.set(archive, idx);
    }
    return idx;
  }

  /** Compresses `data` and stores it as group `group` of `archive`, bumping its version. */
  putGroup(archive: number, group: number, data: Uint8Array, options: PutGroupOptions = {}): Js5Group {
    if (archive === 255)
      throw new Js5Error('ERR_JS5_BAD_ARGUMENT', 'archive 255 holds indexes; use the archive itself');
    const idx = this.index(archive);
    let byId = this.byId.get(archive);
    if (byId === undefined) {
      byId = new Map(idx.groups.map((g) => [g.id, g]));
      this.byId.set(archive, byId);
    }
    let entry = byId.get(group);
    if (entry === undefined) {
      entry = { id: group, checksum: 0, version: 0, files: (options.files ?? [0]).map((id) => ({ id })) };
      idx.groups.push(entry);
      byId.set(group, entry);
    }
    entry.version = (entry.version + 1) | 0;
    if (options.nameHash !== undefined) entry.nameHash = options.nameHash;
    const container = encodeContainer(data, options.compression ?? 'none');
    entry.checksum = crc32(container);
    // Optional columns, filled when the index has their flag (as OpenRS2's Archive does).
    if (idx.flags & IndexFlags.digests) entry.digest = whirlpool(container);
    if (idx.flags & IndexFlags.uncompressedChecksums) entry.uncompressedChecksum = crc32(data);
    if (idx.flags & IndexFlags.lengths) {
      entry.length = container.length;
      entry.uncompressedLength = data.length;
    }
    const stored = Buffer.allocUnsafe(container.length + 2);
    container.copy(stored);
    stored.writeUInt16BE(entry.version & 0xffff, container.length);
    this.store.write(archive, group, stored);
    this.storedBytes += stored.length;
    this.dirty.add(archive);
    return entry;
  }

  /** Stores an already-built container (client downloads) with its version trailer. */
  putContainer(archive: number, group: number, container: Uint8Array, version: number): void {
    const stored = Buffer.allocUnsafe(container.length + 2);
    stored.set(container);
    stored.writeUInt16BE(version & 0xffff, container.length);
    this.store.write(archive, group, stored);
    this.storedBytes += stored.length;
  }

  /** Writes every changed index (version + 1) to archive 255. */
  flush(): void {
    for (const archive of [...this.dirty].sort((a, b) => a - b)) {
      const idx = this.indexes.get(archive)!;
      // Protocol 5 has no version field: its version stays 0.
      if (idx.protocol >= 6) idx.version = (idx.version + 1) | 0;
      idx.groups.sort((a, b) => a.id - b.id);
      this.store.write(255, archive, encodeContainer(writeIndex(idx), this.indexCompression));
    }
    this.dirty.clear();
  }
}

/** A problem `verify` lists: the archive and group, and the typed error (code, message). */
export type VerifyProblem = CacheProblem;

export interface VerifyResult {
  archives: number;
  groups: number;
  /** Bytes of the groups as stored (containers + 2-byte version trailers; indexes not counted). */
  storedBytes: number;
  problems: VerifyProblem[];
  /** Set when the folder holds a download that has not finished (see `DOWNLOAD_STATE_FILE`). */
  unfinishedDownload?: DownloadState;
}

/**
 * The downloader writes this file into the cache folder when it starts and removes it once the
 * last index is written, so `verify` can tell an interrupted download from a complete cache
 * (the downloader writes indexes last, so an interrupted one may have groups but no index).
 */
export const DOWNLOAD_STATE_FILE = 'gamewire-download.json';

export interface DownloadState {
  state: 'downloading';
  host: string;
  port: number;
  profile: string;
  build: number;
  startedAt: string;
}

/** The unfinished-download marker of a cache folder, if any (a damaged marker counts too). */
export function readDownloadState(dir: string): DownloadState | undefined {
  const f = path.join(dir, DOWNLOAD_STATE_FILE);
  let text: string;
  try {
    text = fs.readFileSync(f, 'utf8');
  } catch {
    return undefined;
  }
  try {
    return JSON.parse(text) as DownloadState;
  } catch {
    return { state: 'downloading', host: '?', port: 0, profile: '?', build: 0, startedAt: '?' };
  }
}

/** Counts the groups `verifyCache` will check (for a progress bar); bad indexes count none. */
export function countGroups(store: Store): number {
  let n = 0;
  for (const state of readIndexStates(store).states) n += state.index?.groups.length ?? 0;
  return n;
}

/**
 * Checks every group against its archive's index: present, readable, the CRC and version the
 * index gives, and a container that decompresses. Never throws for a damaged cache: each bad
 * index and group is listed in `problems` (an index as archive 255, group = its archive), and
 * the check goes on. The groups of an index that does not decode cannot be checked (nothing says
 * which exist): only the index is listed. `onGroup` is called once per group checked.
 */
export function verifyCache(store: Store, onGroup?: () => void): VerifyResult {
  const result: VerifyResult = { archives: 0, groups: 0, storedBytes: 0, problems: [] };
  const unfinished = readDownloadState(store.dir);
  if (unfinished !== undefined) result.unfinishedDownload = unfinished;
  const { states, problems } = readIndexStates(store);
  result.problems.push(...problems);
  for (const { archive, index } of states) {
    if (index === undefined) continue;
    result.archives++;
    for (const entry of index.groups) {
      result.groups++;
      onGroup?.();
      let stored: Buffer | undefined;
      try {
        stored = store.read(archive, entry.id);
      } catch (e) {
        result.problems.push(problemOf(archive, entry.id, e));
        continue;
      }
      if (stored === undefined) {
        result.problems.push({
          archive,
          group: entry.id,
          code: 'ERR_JS5_MISSING',
          message: 'listed in the index, absent from the store',
        });
        continue;
      }
      result.storedBytes += stored.length;
      const problem = checkGroup(archive, entry, stored);
      if (problem !== undefined) result.problems.push(problem);
    }
  }
  return result;
}

export interface ArchiveInfo {
  archive: number;
  protocol: number;
  version: number;
  flags: number;
  groups: number;
  files: number;
  storedBytes: number;
}

/**
 * A summary of every indexed archive, plus the VERSIONED master index a server would send (the
 * CRCs a 550 login compares against). Indexes that cannot be read or decoded are left out of
 * `archives` and listed in `problems`; unreadable groups count 0 bytes.
 */
export function cacheInfo(store: Store): {
  kind: string;
  groups: number;
  /** Sum of the archives' `storedBytes` (containers + trailers; indexes not counted). */
  storedBytes: number;
  archives: ArchiveInfo[];
  masterIndex: { archive: number; checksum: number; version: number }[];
  problems: CacheProblem[];
} {
  const { states, problems } = readIndexStates(store);
  const archives: ArchiveInfo[] = [];
  for (const { archive, index: idx } of states) {
    if (idx === undefined) continue;
    let storedBytes = 0;
    for (const g of idx.groups) {
      try {
        storedBytes += store.read(archive, g.id)?.length ?? 0;
      } catch {
        // an unreadable group counts nothing (`verify` lists it)
      }
    }
    archives.push({
      archive,
      protocol: idx.protocol,
      version: idx.version,
      flags: idx.flags,
      groups: idx.groups.length,
      files: idx.groups.reduce((n, g) => n + g.files.length, 0),
      storedBytes,
    });
  }
  const masterIndex = masterIndexFrom(states, 'versioned').entries.map((e, archive) => ({
    archive,
    checksum: e.checksum,
    version: e.version,
  }));
  return {
    kind: store.kind,
    groups: archives.reduce((n, a) => n + a.groups, 0),
    storedBytes: archives.reduce((n, a) => n + a.storedBytes, 0),
    archives,
    masterIndex,
    problems,
  };
}
