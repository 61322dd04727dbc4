/**
 * What the JS5 checks share: the options, and downloads several checks need (the master index,
 * the indexes, a bounded sample of groups), fetched once per run the way a client boots: the
 * master index and indexes as urgent requests, groups pipelined 20 at a time.
 */
import type { CheckRun, ConformTarget } from '../../../core/conform.js';
import { CheckFailure } from '../../../core/conform.js';
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
  shared: SharedDownloads;
}

export interface MasterIndexDownload {
  response: WireResponse;
  entries: MasterIndexEntry[];
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

  /** 255/255, requested urgent as every client does first. */
  masterIndex(run: CheckRun): Promise<MasterIndexDownload> {
    this.master ??= (async () => {
      const peer = await this.connect(run);
      peer.send(requestBytes(1, 255, 255));
      const [response] = await peer.readAll(['255/255']);
      const format = this.ctx().profile.masterIndexFormat;
      const c = response!.container;
      if (c[0] !== 0)
        throw new CheckFailure(`the master index came as compression type ${c[0]}; the clients read it raw`, {
          sent: requestBytes(1, 255, 255),
          expected: 'compression byte 00',
          received: response!.framed.subarray(0, 16),
        });
      let entries: MasterIndexEntry[];
      try {
        entries = readMasterIndex(c.subarray(5), format).entries;
      } catch (err) {
        throw new CheckFailure(`the master index does not read as ${format}: ${(err as Error).message}`, {
          sent: requestBytes(1, 255, 255),
          received: response!.framed.subarray(0, 64),
        });
      }
      return { response: response!, entries };
    })();
    return this.master;
  }

  /** Every index the master index lists (non-zero entries), requested urgent. */
  allIndexes(run: CheckRun): Promise<Map<number, IndexDownload>> {
    this.indexes ??= (async () => {
      const master = await this.masterIndex(run);
      const archives = master.entries.flatMap((e, a) => (e.checksum !== 0 || e.version !== 0 ? [a] : []));
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
   * A bounded sample of groups: every group when the indexes list at most `maxGroups`, else an
   * even spread over all of them; downloading stops at `maxBytes`. Requested urgent (the
   * responses carry no 0x80 flag for any client family, so the sample reads the same for all).
   */
  groupSample(run: CheckRun): Promise<GroupDownload[]> {
    this.groups ??= (async () => {
      const c = this.ctx();
      const indexes = await this.allIndexes(run);
      const all: { archive: number; group: number; crc: number; version: number }[] = [];
      for (const d of indexes.values())
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

/** CRC32 of a received container, signed as the clients and indexes store it. */
export function containerCrc(r: WireResponse): number {
  return crc32(r.container);
}
