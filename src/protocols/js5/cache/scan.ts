/**
 * Reading a cache that may be damaged: every index and group comes back either usable or with a
 * typed problem, never as a thrown error, so `verify` can list every bad group and the server can
 * start and serve every good one (docs/js5.md, "A damaged cache").
 */
import { GamewireError } from '../../../wire/errors.js';
import { decodeContainer, splitTrailer } from './container.js';
import { crc32 } from './crc.js';
import { type Js5Group, type Js5Index, readIndex } from './js5-index.js';
import type { Store } from './store.js';

/** One bad index or group: where, and the typed error that says what is wrong. */
export interface CacheProblem {
  /** 255 for an index (then `group` is the archive it indexes). */
  archive: number;
  group: number;
  code: string;
  message: string;
}

/**
 * The problem a read or decode failure means. Readers and decoders throw only typed errors
 * (`GamewireError` and its subclasses); anything else is a fault of gamewire's own, still listed
 * (as `ERR_INTERNAL`) rather than thrown, and the tests check that it never appears.
 */
export function problemOf(archive: number, group: number, e: unknown): CacheProblem {
  if (e instanceof GamewireError) return { archive, group, code: e.code, message: e.message };
  const detail = e instanceof Error ? e.message : String(e);
  return { archive, group, code: 'ERR_INTERNAL', message: `internal fault: ${detail}` };
}

/** An archive's index as found in the store. */
export interface IndexState {
  archive: number;
  /** The stored container (what the master index checksums and 255/archive serves), when readable. */
  stored?: Buffer;
  /** The decoded index, when the stored container decodes. */
  index?: Js5Index;
  /** Why `stored` or `index` is missing. */
  problem?: CacheProblem;
}

/**
 * Every index in archive 255 (archives 0–254), ascending; unreadable or undecodable ones come
 * back with their problem. `problems` also holds a failure to list archive 255 itself.
 */
export function readIndexStates(store: Store): { states: IndexState[]; problems: CacheProblem[] } {
  const states: IndexState[] = [];
  const problems: CacheProblem[] = [];
  let archives: number[];
  try {
    archives = store.list(255).filter((a) => a < 255);
  } catch (e) {
    problems.push(problemOf(255, 255, e));
    return { states, problems };
  }
  for (const archive of archives) {
    const state: IndexState = { archive };
    states.push(state);
    try {
      const stored = store.read(255, archive);
      if (stored === undefined) continue;
      state.stored = stored;
      state.index = readIndex(decodeContainer(stored, 'none').data);
    } catch (e) {
      state.problem = problemOf(255, archive, e);
      problems.push(state.problem);
    }
  }
  return { states, problems };
}

/**
 * Checks a stored group against its index entry, as `verify` does: the container's header and
 * size, the CRC and version the index gives, and that it decompresses. (The server checks only
 * the first two, which is what a client checks: responses.ts.)
 */
export function checkGroup(archive: number, entry: Js5Group, stored: Buffer): CacheProblem | undefined {
  const group = entry.id;
  try {
    const { container, version } = splitTrailer(stored);
    const crc = crc32(container);
    if (crc !== entry.checksum) {
      return { archive, group, code: 'ERR_JS5_CRC', message: `crc ${crc} != index ${entry.checksum}` };
    }
    if (version === undefined)
      return { archive, group, code: 'ERR_JS5_VERSION', message: 'no version trailer' };
    if (version !== (entry.version & 0xffff)) {
      return {
        archive,
        group,
        code: 'ERR_JS5_VERSION',
        message: `version ${version} != index ${entry.version & 0xffff}`,
      };
    }
    decodeContainer(container, 'none');
    return undefined;
  } catch (e) {
    return problemOf(archive, group, e);
  }
}
