/**
 * A JS5 client: handshake, pipelined requests up to the profile's in-flight caps, responses
 * matched by key (and by the 0x80 flag for the 5xx profile), XOR after a rekey. `downloadCache`
 * builds a whole cache from a server and resumes where a previous run stopped.
 */
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import { FramedStreamClient } from '../../core/framed-client.js';
import { DecodeError, ErrorCode } from '../../wire/errors.js';
import { fixedFrames } from '../../wire/framing.js';
import { CacheWriter, DOWNLOAD_STATE_FILE, type DownloadState } from './cache/cache.js';
import { decodeContainer, splitTrailer } from './cache/container.js';
import { type Js5Index, readIndex } from './cache/js5-index.js';
import { crc32, type MasterIndex, type MasterIndexFormat, readMasterIndex } from './cache/master-index.js';
import { createStore, openStore, type Store } from './cache/store.js';
import { whirlpool } from './cache/whirlpool.js';
import { Js5Error } from './errors.js';
import { MAX_CONTAINER_LENGTH, responseMeasure, unframeResponse, xorInPlace } from './framing.js';
import { HandshakeStatus, INIT_JS5_OPCODE, RequestOpcode } from './messages.js';
import { handshakeIsSeeded, type Js5Profile, PROFILE_NAMES, PROFILES, type ProfileSpec } from './profiles.js';
import { requestKey } from './responses.js';

export interface Js5ClientOptions {
  host: string;
  port: number;
  build: number;
  profile: Js5Profile;
  /** Local address to connect from (tests: 127.0.0.2 is a second loopback address). */
  localAddress?: string;
  /** 16-byte seed for the OSRS ≥ 223 handshake (zeros by default). */
  seed?: Uint8Array;
  /** XOR key to request right after the handshake (0 = none). */
  xorKey?: number;
  /** Largest container accepted. */
  maxContainerBytes?: number;
  /** Connect + handshake timeout. */
  timeoutMs?: number;
  /** Watchdog: with requests in flight and no byte for this long, the connection fails (30 s, like clients). */
  idleTimeoutMs?: number;
  /** Master index format to expect (default: the profile's). */
  masterIndexFormat?: MasterIndexFormat;
  /** Override the profile's in-flight caps (e.g. to flood in tests). */
  urgentCap?: number;
  prefetchCap?: number;
}

/** What each handshake reply means, and what the person running the client can do about it. */
function refusal(status: number, build: number, expected?: { build: number; profile: Js5Profile }): string {
  switch (status) {
    case HandshakeStatus.outOfDate:
      return expected !== undefined
        ? `the js5 server refused build ${build} as out of date (reply 6): it expects build ${expected.build}; pass --build ${expected.build} (with --profile ${expected.profile})`
        : `the js5 server refused build ${build} as out of date (reply 6) and accepts none of the profiles' default builds (${PROFILE_NAMES.map((p) => PROFILES[p].defaultBuild).join(', ')}): pass the build it serves with --build (the server's --build)`;
    case HandshakeStatus.full:
      return "the js5 server is full (reply 7): try again later, or raise the server's --js5-max-clients";
    case HandshakeStatus.ipLimit:
      return "the js5 server has too many connections from this address (reply 9): close other clients, or raise the server's --js5-max-per-ip";
    default:
      return `the js5 server refused the handshake with reply ${status}`;
  }
}

/** The server answered the handshake with something other than 0. */
export class Js5HandshakeError extends Js5Error {
  readonly status: number;
  /** The build the client sent. */
  readonly build: number;
  /** The build the server accepts, when the client found it (see `probeServerBuild`). */
  readonly expectedBuild: number | undefined;
  constructor(status: number, build: number, expected?: { build: number; profile: Js5Profile }) {
    super(
      status === HandshakeStatus.outOfDate
        ? 'ERR_JS5_OUT_OF_DATE'
        : status === HandshakeStatus.full
          ? 'ERR_JS5_FULL'
          : status === HandshakeStatus.ipLimit
            ? 'ERR_JS5_IP_LIMIT'
            : 'ERR_JS5_HANDSHAKE',
      refusal(status, build, expected),
    );
    this.status = status;
    this.build = build;
    this.expectedBuild = expected?.build;
  }
  override get name(): string {
    return 'Js5HandshakeError';
  }
}

/**
 * After a reply 6, finds which build the server accepts by trying each profile's default build
 * (one short connection each, closed at once). Returns undefined when none is accepted.
 */
export async function probeServerBuild(
  options: Pick<Js5ClientOptions, 'host' | 'port' | 'localAddress' | 'timeoutMs'>,
): Promise<{ build: number; profile: Js5Profile } | undefined> {
  for (const profile of PROFILE_NAMES) {
    const build = PROFILES[profile].defaultBuild;
    try {
      const c = await Js5Client.connect({ ...options, profile, build, idleTimeoutMs: 0 });
      c.socket.destroy();
      return { build, profile };
    } catch (e) {
      if (!(e instanceof Js5HandshakeError) || e.status !== HandshakeStatus.outOfDate) return undefined;
    }
  }
  return undefined;
}

interface Waiter {
  resolve(container: Buffer): void;
  reject(err: Error): void;
}

interface Pending {
  key: number;
  urgent: boolean;
  waiter: Waiter;
}

export class Js5Client {
  readonly profile: ProfileSpec;
  /** The framed-stream loop under this client (core/framed-client.ts). */
  private readonly link: FramedStreamClient;
  /** Requests not yet sent, one FIFO per kind: a prefetch waiting at its cap never blocks an urgent one. */
  private readonly queues: { urgent: Pending[]; prefetch: Pending[] } = { urgent: [], prefetch: [] };
  private readonly heads = { urgent: 0, prefetch: 0 };
  private readonly urgentInFlight = new Map<number, Waiter[]>();
  private readonly prefetchInFlight = new Map<number, Waiter[]>();
  private urgentCount = 0;
  private prefetchCount = 0;
  private readonly urgentCap: number;
  private readonly prefetchCap: number;
  private xorKey = 0;
  private readonly masterIndexFormat: MasterIndexFormat;
  private failure: Error | undefined;
  /** Bytes of responses received (framed), for progress. */
  bytesReceived = 0;
  private lastByteAt = Date.now();
  private watchdog: NodeJS.Timeout | undefined;

  private constructor(link: FramedStreamClient, options: Js5ClientOptions) {
    this.link = link;
    this.profile = PROFILES[options.profile];
    this.urgentCap = options.urgentCap ?? this.profile.urgentCap;
    this.masterIndexFormat = options.masterIndexFormat ?? this.profile.masterIndexFormat;
    this.prefetchCap = options.prefetchCap ?? this.profile.prefetchCap;
  }

  /** @internal The socket (tests, and stopping a load session at once). */
  get socket(): net.Socket {
    return this.link.socket!;
  }

  /**
   * Connects, handshakes and sends the post-handshake packets of the profile. The handshake reply
   * is the stream's first frame (one byte); responses follow, framed by `responseMeasure`.
   */
  static async connect(options: Js5ClientOptions): Promise<Js5Client> {
    const timeoutMs = options.timeoutMs ?? 10_000;
    const maxContainerBytes = options.maxContainerBytes ?? MAX_CONTAINER_LENGTH;
    let client: Js5Client | undefined;
    /** Bytes of the chunk that carried the handshake reply. */
    let firstChunkBytes = 0;
    const link: FramedStreamClient = new FramedStreamClient({
      host: options.host,
      port: options.port,
      ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
      timeoutMs,
      ready: 'first-frame',
      measure: fixedFrames(1),
      maxFrameBytes: maxContainerBytes + 64 * 1024,
      errors: {
        refused: (cause) =>
          new Js5Error(
            'ERR_JS5_NO_SERVER',
            `no server at ${options.host}:${options.port}: is \`gamewire serve js5\` running there?`,
            { cause },
          ),
        timeout: () =>
          new Js5Error(
            'ERR_JS5_TIMEOUT',
            `no js5 handshake reply from ${options.host}:${options.port} within ${timeoutMs} ms: is it a js5 server?`,
          ),
        connection: (cause, phase) =>
          new Js5Error(
            'ERR_JS5_CONNECTION',
            phase === 'open'
              ? `js5 connection to ${options.host}:${options.port} lost: ${cause.message}`
              : `js5 connection to ${options.host}:${options.port} failed: ${cause.message}`,
            { cause },
          ),
        closed: (phase) =>
          phase === 'handshake' || client === undefined
            ? new Js5Error('ERR_JS5_CONNECTION', 'the server closed the connection during the js5 handshake')
            : client.closedError(),
        // Framing errors are the protocol's own DecodeErrors; handler errors are typed already.
        malformed: (cause) => cause,
        handler: (cause) =>
          cause instanceof Error ? cause : new Js5Error('ERR_JS5_CONNECTION', String(cause)),
      },
      onConnect: () => {
        const seeded = handshakeIsSeeded(options.profile, options.build);
        const hs = Buffer.alloc(seeded ? 21 : 5);
        hs[0] = INIT_JS5_OPCODE;
        hs.writeUInt32BE(options.build, 1);
        if (seeded && options.seed !== undefined) hs.set(options.seed.subarray(0, 16), 5);
        link.write(hs);
      },
      onChunk: (chunk) => {
        if (client === undefined) {
          firstChunkBytes = chunk.length;
          return;
        }
        client.bytesReceived += chunk.length;
        client.lastByteAt = Date.now();
        if (client.xorKey !== 0) xorInPlace(chunk, client.xorKey);
      },
      onFrame: (buf, start, end) => {
        if (client !== undefined) {
          client.onResponse(buf, start, end);
          return;
        }
        const status = buf[start]!;
        if (status !== HandshakeStatus.ok) throw new Js5HandshakeError(status, options.build);
        link.setMeasure(responseMeasure(maxContainerBytes));
        client = new Js5Client(link, options);
        // What followed the reply byte in its chunk counts as response bytes.
        client.bytesReceived = firstChunkBytes - 1;
        client.start(options.xorKey ?? 0, options.idleTimeoutMs ?? 30_000);
      },
      onClose: (error) => {
        if (client !== undefined && error !== undefined) client.abort(error);
      },
    });
    await link.connect();
    return client!;
  }

  /** The error pending requests fail with when the server closes the connection. */
  private closedError(): Js5Error {
    return new Js5Error(
      'ERR_JS5_CLOSED',
      this.inFlight > 0
        ? `the js5 server closed the connection with ${this.inFlight} request(s) unanswered (a group it does not have, or something on the way closed it?)`
        : 'the js5 server closed the connection',
    );
  }

  private start(xorKey: number, idleTimeoutMs: number): void {
    if (idleTimeoutMs > 0) {
      this.watchdog = setInterval(
        () => {
          if (this.inFlight > 0 && Date.now() - this.lastByteAt > idleTimeoutMs) {
            this.abort(
              new Js5Error(
                'ERR_JS5_TIMEOUT',
                `no response for ${idleTimeoutMs} ms with ${this.inFlight} request(s) in flight`,
              ),
            );
          }
        },
        Math.min(1000, idleTimeoutMs),
      );
      this.watchdog.unref();
    }
    const hello: number[] = [];
    if (this.profile.sendsConnected) hello.push(RequestOpcode.connected, 0, 0, 3);
    hello.push(RequestOpcode.loggedOut, 0, 0, 0);
    this.link.write(Buffer.from(hello));
    if (xorKey !== 0) this.rekey(xorKey);
  }

  /**
   * Asks the server to XOR every downstream byte with `key` from now on. Like real clients, call it
   * only while no response is in flight: bytes already on their way would be un-XORed wrongly.
   */
  rekey(key: number): void {
    this.link.write(Buffer.of(RequestOpcode.rekey, key & 0xff, 0, 0));
    this.xorKey = key & 0xff;
  }

  /** Sends raw bytes (tests: malformed input). */
  sendRaw(bytes: Uint8Array): void {
    this.link.write(bytes);
  }

  /** Requests a group; resolves with its container (version trailer not included). */
  request(archive: number, group: number, urgent = false): Promise<Buffer> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.queues[urgent ? 'urgent' : 'prefetch'].push({
        key: requestKey(archive, group),
        urgent,
        waiter: { resolve, reject },
      });
      this.pump();
    });
  }

  /** Fetches and decodes the master index (255/255). */
  async masterIndex(): Promise<MasterIndex> {
    const container = await this.request(255, 255, true);
    return readMasterIndex(decodeContainer(container, 'none').data, this.masterIndexFormat);
  }

  get inFlight(): number {
    return this.urgentCount + this.prefetchCount;
  }

  private pump(): void {
    const out: number[] = [];
    // Urgent first, then prefetch, each up to its own cap.
    for (const kind of ['urgent', 'prefetch'] as const) {
      const queue = this.queues[kind];
      const urgent = kind === 'urgent';
      while (this.heads[kind] < queue.length) {
        if (urgent ? this.urgentCount >= this.urgentCap : this.prefetchCount >= this.prefetchCap) break;
        const p = queue[this.heads[kind]++]!;
        const map = urgent ? this.urgentInFlight : this.prefetchInFlight;
        const list = map.get(p.key);
        if (list !== undefined) list.push(p.waiter);
        else map.set(p.key, [p.waiter]);
        if (urgent) this.urgentCount++;
        else this.prefetchCount++;
        // The watchdog counts from the first request of an idle connection.
        if (this.inFlight === 1) this.lastByteAt = Date.now();
        out.push(
          urgent ? RequestOpcode.urgent : RequestOpcode.prefetch,
          p.key >>> 16,
          (p.key >>> 8) & 0xff,
          p.key & 0xff,
        );
      }
      if (this.heads[kind] > 4096) {
        queue.splice(0, this.heads[kind]);
        this.heads[kind] = 0;
      }
    }
    if (out.length > 0) this.link.write(Buffer.from(out));
  }

  private onResponse(buf: Buffer, start: number, end: number): void {
    const plain = unframeResponse(buf, start, end);
    const key = requestKey(plain[0]!, plain.readUInt16BE(1));
    const flagged = (plain[3]! & 0x80) !== 0;
    let urgent: boolean;
    if (this.profile.prefetchFlag) urgent = !flagged;
    else urgent = this.urgentInFlight.has(key);
    const map = urgent ? this.urgentInFlight : this.prefetchInFlight;
    const list = map.get(key);
    if (list === undefined) {
      throw new DecodeError(
        ErrorCode.BAD_VALUE,
        `response for ${plain[0]}/${plain.readUInt16BE(1)} that is not in flight`,
        start,
      );
    }
    const waiter = list.shift()!;
    if (list.length === 0) map.delete(key);
    if (urgent) this.urgentCount--;
    else this.prefetchCount--;
    plain[3]! &= 0x7f;
    waiter.resolve(plain.subarray(3));
    this.pump();
  }

  private abort(err: Error): void {
    if (this.watchdog !== undefined) clearInterval(this.watchdog);
    if (this.failure !== undefined) return;
    this.failure = err;
    void this.link.destroy();
    const all: Waiter[] = [];
    for (const m of [this.urgentInFlight, this.prefetchInFlight]) for (const l of m.values()) all.push(...l);
    for (const kind of ['urgent', 'prefetch'] as const) {
      const queue = this.queues[kind];
      for (let i = this.heads[kind]; i < queue.length; i++) all.push(queue[i]!.waiter);
      queue.length = 0;
      this.heads[kind] = 0;
    }
    this.urgentInFlight.clear();
    this.prefetchInFlight.clear();
    for (const w of all) w.reject(err);
  }

  /** Ends the connection (flushing what was written) and resolves once it is closed. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      if (this.watchdog !== undefined) clearInterval(this.watchdog);
      if (this.link.socket?.destroyed !== false) return resolve();
      this.failure ??= new Js5Error('ERR_JS5_CLOSED', 'client closed');
      void this.link.end().then(resolve);
    });
  }
}

// ---- whole-cache download -----------------------------------------------------------------

export interface DownloadOptions extends Js5ClientOptions {
  out: string;
  /** Store kind for a new cache (an existing one is reused as it is). */
  kind?: 'disk' | 'flat';
  /** Called after each group (downloaded or already present). */
  onProgress?(done: number, total: number): void;
  /** Called once the total is known. */
  onTotal?(total: number): void;
}

export interface DownloadSummary {
  archives: number;
  groups: number;
  downloaded: number;
  skipped: number;
  /**
   * Bytes of all the cache's groups as stored once the run is done (containers + 2-byte version
   * trailers, downloaded and skipped alike; indexes not counted): the measure `verify` and `info`
   * print.
   */
  storedBytes: number;
  /**
   * Groups an index lists that the server would not send (it closed the connection on them, or
   * never answered): every other group is downloaded; a later run asks for these again.
   */
  missing: { archive: number; group: number }[];
}

/** A request that failed because its connection ended (closed by the server, or silent). */
function connectionLost(err: unknown): boolean {
  return (
    err instanceof Js5Error &&
    (err.code === 'ERR_JS5_CLOSED' || err.code === 'ERR_JS5_TIMEOUT' || err.code === 'ERR_JS5_CONNECTION')
  );
}

/** The stored size of a group that is present and matches its index entry, else undefined. */
function groupIsCurrent(
  store: Store,
  archive: number,
  group: number,
  checksum: number,
  version: number,
): number | undefined {
  try {
    const stored = store.read(archive, group);
    if (stored === undefined) return undefined;
    const { container, version: v } = splitTrailer(stored);
    return v === (version & 0xffff) && crc32(container) === checksum ? stored.length : undefined;
  } catch {
    return undefined;
  }
}

/**
 * True when `dir` is absent, empty, or already looks like a cache (a disk store, flat-store
 * archive folders, or an unfinished download): the only folders a download may write into.
 */
function cacheOrEmpty(dir: string): boolean {
  if (!fs.existsSync(dir)) return true;
  const names = fs.readdirSync(dir);
  return (
    names.length === 0 ||
    names.some((n) => n === 'main_file_cache.dat2' || n === DOWNLOAD_STATE_FILE || /^\d{1,3}$/.test(n))
  );
}

/**
 * Downloads the master index, every index and every group, verifying CRC32 and versions, into
 * a disk or flat-file cache at `out`. Groups already present and valid are skipped (resume).
 *
 * A server closes the connection on a group it does not have (or leaves it unanswered), and with
 * it every request behind it. The first unanswered request is then the suspect: it is asked for
 * again alone, on a new connection; if that fails too it is listed in `missing`, and the rest
 * carry on pipelined. So one missing group costs one extra connection, not the download.
 */
export async function downloadCache(options: DownloadOptions): Promise<DownloadSummary> {
  if (!cacheOrEmpty(options.out)) {
    throw new Js5Error(
      'ERR_JS5_NOT_A_CACHE',
      `${options.out} is not empty and holds no cache: pass a new folder, or one a previous download wrote`,
    );
  }
  let client: Js5Client | undefined = await Js5Client.connect(options);
  const store =
    fs.existsSync(options.out) && fs.readdirSync(options.out).length > 0
      ? openStore(options.out, { writable: true })
      : createStore(options.out, options.kind ?? 'disk');
  const writer = new CacheWriter(store);
  const summary: DownloadSummary = {
    archives: 0,
    groups: 0,
    downloaded: 0,
    skipped: 0,
    storedBytes: 0,
    missing: [],
  };
  // Marks the folder as an unfinished download until the last index is written.
  const marker = path.join(options.out, DOWNLOAD_STATE_FILE);
  const state: DownloadState = {
    state: 'downloading',
    host: options.host,
    port: options.port,
    profile: options.profile,
    build: options.build,
    startedAt: new Date().toISOString(),
  };
  fs.writeFileSync(marker, `${JSON.stringify(state)}\n`);
  try {
    const master = await client.masterIndex();
    const indexes: { archive: number; container: Buffer; index: Js5Index }[] = [];
    await Promise.all(
      master.entries.map(async (entry, archive) => {
        if (entry.checksum === 0 && entry.version === 0) return;
        const container = await client!.request(255, archive, true);
        if (crc32(container) !== entry.checksum) {
          throw new DecodeError('ERR_JS5_CRC', `index ${archive}: crc does not match the master index`, 0);
        }
        if (entry.digest !== undefined && !whirlpool(container).equals(entry.digest)) {
          throw new DecodeError(
            'ERR_JS5_DIGEST',
            `index ${archive}: whirlpool does not match the master index`,
            0,
          );
        }
        const index = readIndex(decodeContainer(container, 'none').data);
        if (master.format !== 'original' && index.version !== entry.version) {
          throw new DecodeError(
            'ERR_JS5_VERSION',
            `index ${archive}: version does not match the master index`,
            0,
          );
        }
        indexes.push({ archive, container, index });
      }),
    );
    indexes.sort((a, b) => a.archive - b.archive);
    const total = indexes.reduce((n, x) => n + x.index.groups.filter((g) => g.id <= 0xffff).length, 0);
    options.onTotal?.(total);
    let done = 0;
    type Job = { archive: number; group: number; checksum: number; version: number };
    let pending: Job[] = [];
    for (const { archive, index } of indexes) {
      summary.archives++;
      for (const g of index.groups) {
        if (g.id > 0xffff) continue;
        summary.groups++;
        const current = groupIsCurrent(store, archive, g.id, g.checksum, g.version);
        if (current !== undefined) {
          summary.skipped++;
          summary.storedBytes += current;
          options.onProgress?.(++done, total);
          continue;
        }
        pending.push({ archive, group: g.id, checksum: g.checksum, version: g.version });
      }
    }
    const save = (job: Job, container: Buffer) => {
      if (crc32(container) !== job.checksum) {
        throw new DecodeError(
          'ERR_JS5_CRC',
          `group ${job.archive}/${job.group}: crc does not match its index`,
          0,
        );
      }
      writer.putContainer(job.archive, job.group, container, job.version);
      summary.downloaded++;
      summary.storedBytes += container.length + 2;
      options.onProgress?.(++done, total);
    };
    /** Resolves true once saved, false when the connection ended first. */
    const fetchGroup = (c: Js5Client, job: Job): Promise<boolean> =>
      c.request(job.archive, job.group, false).then(
        (container) => {
          save(job, container);
          return true;
        },
        (err: unknown) => {
          if (connectionLost(err)) return false;
          throw err;
        },
      );
    while (pending.length > 0) {
      client ??= await Js5Client.connect(options);
      const c: Js5Client = client;
      const saved = await Promise.all(pending.map((job) => fetchGroup(c, job)));
      const first = saved.indexOf(false);
      if (first < 0) break;
      const suspect = pending[first]!;
      pending = pending.filter((_, i) => !saved[i] && i !== first);
      await c.close();
      client = await Js5Client.connect(options);
      if (!(await fetchGroup(client, suspect))) {
        summary.missing.push({ archive: suspect.archive, group: suspect.group });
        options.onProgress?.(++done, total);
        await client.close();
        client = undefined;
      }
    }
    summary.missing.sort((a, b) => a.archive - b.archive || a.group - b.group);
    // Indexes last: a cache is complete only once its indexes are written.
    for (const { archive, container } of indexes) store.write(255, archive, container);
    fs.rmSync(marker, { force: true });
    return summary;
  } finally {
    store.close();
    await client?.close();
  }
}
