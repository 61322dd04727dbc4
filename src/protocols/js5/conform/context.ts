/**
 * What the JS5 checks share: the options, and downloads several checks need (the master index,
 * the indexes, a bounded sample of groups), fetched once per run the way a client boots: the
 * master index and indexes as urgent requests, groups pipelined 20 at a time.
 */
import type { CheckRun, ConformTarget } from '../../../core/conform.js';
import { CheckFailure, CheckSkip } from '../../../core/conform.js';
import { decodeContainer } from '../cache/container.js';
import { type Js5Index, readIndex } from '../cache/js5-index.js';
import { crc32, type MasterIndexEntry, readMasterIndex } from '../cache/master-index.js';
import type { ProfileSpec } from '../profiles.js';
import { Js5Peer, key, markerFailure, requestBytes, type WireResponse } from './peer.js';

export interface Js5ConformContext {
  target: ConformTarget | undefined;
  profile: ProfileSpec;
  build: number;
  /** Old School from revision 223 sends a 21-byte handshake. */
  seeded: boolean;
  /** Master index entries the client needs (archives it creates at start). */
  minArchives: number;
  /** Groups downloaded at most by the group checks (a sample when the cache has more). */
  maxGroups: number;
  /** Bytes downloaded at most by the group sample. */
  maxBytes: number;
  /** Connections opened at most to see a "server full" reply. */
  probeConnections: number;
  /**
   * How long missing-group waits, after the present group's response, for an answer to the
   * missing one (which must not come). 2000 ms; not a flag: a test against a server on loopback
   * may take less.
   */
  missingGroupQuietMs: number;
  shared: SharedDownloads;
}

/**
 * The master index as the profile's client reads it: raw (it never decompresses it), one entry
 * per archive it creates, at `5 + 4 × archive` (ORIGINAL, 435) or `5 + 8 × archive` (VERSIONED),
 * and nothing else: neither the declared length nor the bytes after its last entry are checked.
 */
export interface MasterIndexDownload {
  response: WireResponse;
  /** Entries of the archives the client creates (`minArchives`), as far as the bytes hold them. */
  entries: MasterIndexEntry[];
  /** Why the client cannot use it at all (a compressed container), or undefined. */
  unreadable?: string;
  /** What the client does not read but is worth fixing (reported as a warning). */
  warnings: string[];
}

export interface IndexDownload {
  archive: number;
  response: WireResponse;
  /** Undefined when the index does not decode (`error` says why). */
  index?: Js5Index;
  error?: string;
}

export interface GroupDownload {
  archive: number;
  group: number;
  /** From the archive's index. */
  expectedCrc: number;
  version: number;
  response: WireResponse;
}

/** How many requests the downloads keep in flight (the 435 and 530 clients' cap). */
const PIPELINE = 20;

/** Requests `keys` on `peer`, at most PIPELINE in flight, and returns the responses by key. */
/**
 * For a check that needs a download but does not judge it: when the server did not send it the
 * way the client reads it, that is the judging check's failure, and a skip here (its reason names
 * what could not be had).
 */
export async function needs<T>(download: Promise<T>, what: string): Promise<T> {
  try {
    return await download;
  } catch (err) {
    if (err instanceof CheckFailure)
      throw new CheckSkip(`${what} could not be had as the client reads it: ${err.message}`);
    throw err;
  }
}

export async function pipelined(
  peer: Js5Peer,
  keys: readonly [number, number][],
  opcode: number,
  onResponse?: (r: WireResponse) => boolean,
): Promise<Map<string, WireResponse>> {
  const out = new Map<string, WireResponse>();
  let next = 0;
  const inFlight: string[] = [];
  const fill = (): void => {
    const batch: Buffer[] = [];
    while (next < keys.length && inFlight.length < PIPELINE) {
      const [a, g] = keys[next++]!;
      batch.push(requestBytes(opcode, a, g));
      inFlight.push(key(a, g));
    }
    if (batch.length > 0) peer.send(Buffer.concat(batch));
  };
  fill();
  let more = true;
  while (inFlight.length > 0) {
    const r = await peer.readResponse(10_000);
    const k = key(r.archive, r.group);
    const i = inFlight.indexOf(k);
    if (i < 0)
      throw new CheckFailure(`response ${k} matches no request in flight`, {
        sent: peer.probe.sent,
        expected: `one of ${inFlight.slice(0, 6).join(', ')}`,
        received: r.framed.subarray(0, 64),
      });
    if (r.badMarkers.length > 0) throw markerFailure(r, peer.probe.sent);
    inFlight.splice(i, 1);
    out.set(k, r);
    if (onResponse !== undefined && !onResponse(r)) more = false;
    if (more) fill();
  }
  return out;
}

export class SharedDownloads {
  private master: Promise<MasterIndexDownload> | undefined;
  private indexes: Promise<Map<number, IndexDownload>> | undefined;
  private groups: Promise<GroupDownload[]> | undefined;
  private readonly ctx: () => Js5ConformContext;

  constructor(ctx: () => Js5ConformContext) {
    this.ctx = ctx;
  }

  private async connect(run: CheckRun): Promise<Js5Peer> {
    const c = this.ctx();
    const peer = await Js5Peer.open(c.target!, run);
    await peer.open(c.build, c.seeded);
    return peer;
  }

  /**
   * 255/255, requested urgent as every client does first, read as the profile's client reads it
   * (`MasterIndexDownload`). Rejects only when no response could be read at all.
   */
  masterIndex(run: CheckRun): Promise<MasterIndexDownload> {
    this.master ??= (async () => {
      const c = this.ctx();
      const peer = await this.connect(run);
      peer.send(requestBytes(1, 255, 255));
      const [response] = await peer.readAll(['255/255']);
      return readAsClient(response!, c.profile.masterIndexFormat, c.minArchives, c.profile.name);
    })();
    return this.master;
  }

  /**
   * The master index entries a check can use (for a check other than `master-index`): a skip when
   * the client could not read any.
   */
  async entries(run: CheckRun): Promise<MasterIndexEntry[]> {
    const m = await needs(this.masterIndex(run), 'the master index');
    if (m.unreadable !== undefined)
      throw new CheckSkip(`the client cannot read the master index: ${m.unreadable}`);
    return m.entries;
  }

  /**
   * The index of every archive the client reads a master index entry for (a (0, 0) entry is a
   * hole: not requested), requested urgent. Rejects (CheckFailure) when the responses cannot be
   * read as the client reads them (a wrong block marker); a skip when the master index cannot.
   */
  allIndexes(run: CheckRun): Promise<Map<number, IndexDownload>> {
    this.indexes ??= (async () => {
      const entries = await this.entries(run);
      const archives = entries.flatMap((e, a) => (e.checksum !== 0 || e.version !== 0 ? [a] : []));
      const peer = await this.connect(run);
      const got = await pipelined(
        peer,
        archives.map((a) => [255, a] as [number, number]),
        1,
      );
      const out = new Map<number, IndexDownload>();
      for (const a of archives) {
        const response = got.get(key(255, a))!;
        try {
          const index = readIndex(decodeContainer(response.container, 'none').data);
          out.set(a, { archive: a, response, index });
        } catch (err) {
          out.set(a, { archive: a, response, error: (err as Error).message });
        }
      }
      return out;
    })();
    return this.indexes;
  }

  /**
   * The indexes the client keeps: those whose CRC (and, VERSIONED, version) match the master
   * index and that decode. The client rejects the others (it rekeys and downloads them again),
   * so it never asks for their groups. A skip when there are none.
   */
  async acceptedIndexes(run: CheckRun): Promise<IndexDownload[]> {
    const indexes = await needs(this.allIndexes(run), 'the indexes');
    const entries = await this.entries(run);
    const versioned = this.ctx().profile.masterIndexFormat !== 'original';
    const ok = [...indexes.values()].filter(
      (d) =>
        d.index !== undefined &&
        containerCrc(d.response) === entries[d.archive]!.checksum &&
        (!versioned || d.index.version === entries[d.archive]!.version),
    );
    if (ok.length === 0 && indexes.size > 0)
      throw new CheckSkip(
        `none of the ${indexes.size} indexes matches its master index entry and decodes (index-crcs), so the client asks for no group`,
      );
    return ok;
  }

  /**
   * A bounded sample of groups: every group when the indexes list at most `maxGroups`, else an
   * even spread over all of them; downloading stops at `maxBytes`. Requested urgent (the
   * responses carry no 0x80 flag for any client family, so the sample reads the same for all).
   */
  groupSample(run: CheckRun): Promise<GroupDownload[]> {
    this.groups ??= (async () => {
      const c = this.ctx();
      const indexes = await this.acceptedIndexes(run);
      const all: { archive: number; group: number; crc: number; version: number }[] = [];
      for (const d of indexes)
        for (const g of d.index?.groups ?? [])
          if (g.id <= 0xffff)
            all.push({ archive: d.archive, group: g.id, crc: g.checksum, version: g.version });
      const picked =
        all.length <= c.maxGroups
          ? all
          : Array.from({ length: c.maxGroups }, (_, i) => all[Math.floor((i * all.length) / c.maxGroups)]!);
      const peer = await this.connect(run);
      let bytes = 0;
      const got = await pipelined(
        peer,
        picked.map((p) => [p.archive, p.group] as [number, number]),
        1,
        (r) => {
          bytes += r.framed.length;
          return bytes < c.maxBytes;
        },
      );
      const out: GroupDownload[] = [];
      for (const p of picked) {
        const response = got.get(key(p.archive, p.group));
        if (response !== undefined)
          out.push({ archive: p.archive, group: p.group, expectedCrc: p.crc, version: p.version, response });
      }
      return out;
    })();
    return this.groups;
  }
}

/**
 * Reads a master index response the way the profile's client does: raw, entry `a` at
 * `5 + width × a` for each archive it creates, while the bytes hold one; the declared length is
 * never checked (the 435 client's `UpdateServer.readJS5CRCTableResponse`, the 530 client's
 * `Js5MasterIndex`). A length that is not a whole number of entries is a warning; entries past
 * the archives the client creates are not read (later clients have more archives).
 */
export function readAsClient(
  response: WireResponse,
  format: 'original' | 'versioned' | 'digests',
  archives: number,
  client: string,
): MasterIndexDownload {
  const c = response.container;
  const warnings: string[] = [];
  if (c[0] !== 0)
    return {
      response,
      entries: [],
      warnings,
      unreadable: `it came as compression type ${c[0]}; the clients read it raw, without decompressing it`,
    };
  const length = c.length - 5;
  if (format === 'digests') {
    try {
      return {
        response,
        entries: readMasterIndex(c.subarray(5), format).entries.slice(0, archives),
        warnings,
      };
    } catch (err) {
      return { response, entries: [], warnings, unreadable: (err as Error).message };
    }
  }
  const width = format === 'original' ? 4 : 8;
  const entries: MasterIndexEntry[] = [];
  for (let a = 0; a < archives && 5 + width * (a + 1) <= c.length; a++)
    entries.push({
      checksum: c.readInt32BE(5 + width * a),
      version: width === 8 ? c.readInt32BE(9 + width * a) : 0,
    });
  if (length % width !== 0)
    warnings.push(
      `the declared length ${length} is not a multiple of ${width} (${format} entries); the ${client} client never checks it: it reads entry N at 5 + ${width} × N`,
    );
  return { response, entries, warnings };
}

/** CRC32 of a received container, signed as the clients and indexes store it. */
export function containerCrc(r: WireResponse): number {
  return crc32(r.container);
}
