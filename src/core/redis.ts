/**
 * The one way gamewire talks to Redis (the control plane of a scaled-out fleet: nodes,
 * allocations, join codes, accounts, sessions). Never used on a per-packet path.
 *
 * Choices, for every store built on it:
 * - ioredis is loaded only when a server is started with `--redis` (the embedded defaults never
 *   load it);
 * - the URL is one Redis (`redis://`, `rediss://`) or a Sentinel set
 *   (`redis+sentinel://[user:pass@]host1:26379,host2:26379/mymaster[?db=N&tls=true&…]`, see
 *   `parseRedisUrl`): with a Sentinel set, every connection asks the sentinels for the primary,
 *   listens for their `+switch-master`, and follows a promoted replica without a restart;
 * - start-up waits for the first connection (`connectTimeoutMs`) and fails with one line naming
 *   the URL and the flag, so `--redis redis://typo` never looks like a working server;
 * - after that, an outage never ends the process: ioredis reconnects on its own (backoff up to
 *   `maxBackoffMs`), and commands fail at once while it is down (no offline queue, one try per
 *   command), so a caller can answer 503 instead of hanging;
 * - when the connection is back, the `onReconnect` hooks run first (a node's heartbeat), and only
 *   then does `up` turn true, so a store that waits for `up` never speaks before its node has
 *   re-announced itself;
 * - durable writes (`durableCall`): when the connection asks for replicas (a Sentinel set by
 *   default, or `waitReplicas=N` in the URL), an acknowledgement waits until the write is on that
 *   many replicas (`WAIT`, bounded by `waitTimeoutMs`), else the caller gets
 *   `StoreNotDurableError` (a 503, an RMC error), never a silent success. The WAIT runs on a
 *   second connection of its own, after an `INCR` there (`<prefix>fleet:durable-mark`): a
 *   replica that acknowledged that INCR holds every write answered before it, whichever
 *   connection sent it, so concurrent writers share one round, and a WAIT that blocks (a replica
 *   lost) never holds up the heartbeats on the main connection;
 * - every key is under `prefix` (default `gamewire:`), so several fleets can share one Redis.
 */
import type { RedisOptions } from 'ioredis';
import { CommandError } from './errors.js';
import type { StoreState } from './metrics.js';

export type { StoreState } from './metrics.js';

export interface RedisConnectOptions {
  /** Key prefix of this fleet. Default `gamewire:`. */
  prefix?: string;
  /** How long start-up waits for the first connection. Default 5000 ms. */
  connectTimeoutMs?: number;
  /** Longest wait between reconnection attempts. Default 2000 ms. */
  maxBackoffMs?: number;
  /** Shown in errors: the flag and config key that set the URL. Default `--redis`. */
  flag?: string;
  /** Called when the connection goes down or comes back (for logs and readiness). */
  onStatus?: (up: boolean, err?: Error) => void;
  /**
   * Called when the connection is back on another server than before (a Sentinel failover):
   * the old and new primary (`host:port`) and how long this process was without one.
   */
  onPrimaryChange?: (from: string, to: string, downMs: number) => void;
  /** Overrides the URL's durability (`waitReplicas`, `waitTimeoutMs`). */
  durability?: Partial<RedisDurability>;
}

/** What an acknowledged durable write waits for. */
export interface RedisDurability {
  /** Replicas that must hold a write before it is acknowledged (`WAIT numreplicas`); 0: none. */
  replicas: number;
  /** Longest wait for them, in ms (`WAIT … timeout`). */
  timeoutMs: number;
}

/** A Redis argument: what the stores send. */
export type RedisArg = string | number | Buffer;

/**
 * The Redis commands gamewire's stores send, declared here so that the package's types name no
 * dependency (an ioredis client is one, behind `connectRedis`). `call` sends any other command.
 */
export interface RedisClient {
  eval(script: string, numKeys: number, ...args: RedisArg[]): Promise<unknown>;
  get(key: string): Promise<string | null>;
  set(key: string, value: string, mode: 'PX', milliseconds: number): Promise<unknown>;
  hget(key: string, field: string): Promise<string | null>;
  hlen(key: string): Promise<number>;
  call(command: string, ...args: RedisArg[]): Promise<unknown>;
}

export interface RedisConnection {
  readonly client: RedisClient;
  readonly url: string;
  readonly prefix: string;
  /** True while commands can be sent. */
  readonly up: boolean;
  /**
   * Runs `hook` each time the connection is back after an outage, before `up` turns true (and
   * before `onStatus(true)`); `up` waits for every hook to settle (each command is bounded by the
   * command timeout). Returns a function that removes the hook. Optional, so other
   * implementations of this interface stay valid.
   */
  onReconnect?(hook: () => Promise<unknown>): () => void;
  /** What durable writes wait for (`replicas: 0`: nothing). Optional like `onReconnect`. */
  readonly durability?: RedisDurability;
  /**
   * Runs a write and acknowledges it only once it is durable (see `durableCall`). Optional:
   * without it, `durableCall` is `storeCall`.
   */
  durable?<T>(what: string, fn: () => Promise<T>): Promise<T>;
  /** The store as `/metrics` shows it. */
  state?(): StoreState;
  close(): Promise<void>;
}

/** Thrown by stores when Redis cannot answer now (down, or a command timed out): HTTP 503. */
export class StoreUnavailableError extends CommandError {
  /** Why, as the allocation API's `cause` detail says it. */
  readonly reason: 'store_unavailable' | 'not_durable' = 'store_unavailable';

  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORE_UNAVAILABLE', message, 1, options);
  }

  override get name(): string {
    return 'StoreUnavailableError';
  }
}

/**
 * A write Redis answered but could not make durable in time (fewer replicas than asked held it
 * within the wait): the caller is told it failed (HTTP 503, an RMC error). The write may still
 * be there, or be lost in a failover; retrying is safe for every durable write gamewire makes.
 */
export class StoreNotDurableError extends StoreUnavailableError {
  override readonly reason = 'not_durable' as const;

  override get name(): string {
    return 'StoreNotDurableError';
  }
}

/** The gamewire parameters a Redis URL may carry (removed before ioredis sees the URL). */
const DURABILITY_PARAMS = ['waitReplicas', 'waitTimeoutMs'] as const;
const SENTINEL_PARAMS = new Set<string>([
  ...DURABILITY_PARAMS,
  'db',
  'tls',
  'sentinelUsername',
  'sentinelPassword',
  'sentinelTls',
]);
/** Default wait for replicas, when there is one. */
export const DEFAULT_WAIT_TIMEOUT_MS = 500;
export const DEFAULT_SENTINEL_PORT = 26379;

/** A parsed `--redis` value: gamewire's own description, no dependency's types. */
export interface RedisTarget {
  mode: 'single' | 'sentinel';
  /** Sentinel mode: the primary's name and the sentinels. */
  name?: string;
  sentinels?: { host: string; port: number }[];
  /** Sentinel mode: the Redis servers' credentials, database, TLS; the sentinels' own. */
  username?: string;
  password?: string;
  db?: number;
  tls?: boolean;
  sentinelUsername?: string;
  sentinelPassword?: string;
  sentinelTls?: boolean;
  /** Single mode: the URL without gamewire's parameters. */
  url?: string;
  durability: RedisDurability;
}

function configError(flag: string, url: string, why: string): CommandError {
  return new CommandError('ERR_CONFIG', `${flag} ${redactRedisUrl(url)}: ${why}`, 2);
}

function intParam(flag: string, url: string, key: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max)
    throw configError(
      flag,
      url,
      `${key} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`,
    );
  return n;
}

function boolParam(flag: string, url: string, key: string, raw: string): boolean {
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw configError(flag, url, `${key} must be true or false, got ${JSON.stringify(raw)}`);
}

function durabilityOf(
  flag: string,
  url: string,
  params: URLSearchParams,
  defaultReplicas: number,
): RedisDurability {
  const r = params.get('waitReplicas');
  const t = params.get('waitTimeoutMs');
  return {
    replicas: r === null ? defaultReplicas : intParam(flag, url, 'waitReplicas', r, 0, 16),
    timeoutMs: t === null ? DEFAULT_WAIT_TIMEOUT_MS : intParam(flag, url, 'waitTimeoutMs', t, 1, 60_000),
  };
}

/**
 * Parses `--redis`:
 * - `redis://[user:pass@]host[:port][/db][?waitReplicas=N&waitTimeoutMs=T]`, or `rediss://…`
 *   (TLS): one Redis; durable writes wait for nobody unless `waitReplicas` asks;
 * - `redis+sentinel://[user:pass@]host1[:port1],host2[:port2],…/<primary name>[/db][?params]`
 *   (`rediss+sentinel://` = `tls=true`): a Sentinel set (port 26379 by default), whose primary
 *   `user:pass` and `db` are for; params `db`, `tls`, `sentinelUsername`, `sentinelPassword`,
 *   `sentinelTls`, `waitReplicas` (default 1), `waitTimeoutMs` (default 500). Anything else is
 *   refused (a typo must not pass for a setting).
 */
export function parseRedisUrl(url: string, flag = '--redis'): RedisTarget {
  const scheme = /^([a-z+]+):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'redis+sentinel' || scheme === 'rediss+sentinel') return parseSentinelUrl(url, flag, scheme);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CommandError(
      'ERR_CONFIG',
      `${flag} ${redactRedisUrl(url)}: not a URL (expected redis://host:port or redis+sentinel://host:26379,…/name)`,
      2,
    );
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:')
    throw new CommandError(
      'ERR_CONFIG',
      `${flag} ${redactRedisUrl(url)}: expected a redis://, rediss:// or redis+sentinel:// URL, got ${parsed.protocol}`,
      2,
    );
  const durability = durabilityOf(flag, url, parsed.searchParams, 0);
  let plain = url;
  if (DURABILITY_PARAMS.some((k) => parsed.searchParams.has(k))) {
    for (const k of DURABILITY_PARAMS) parsed.searchParams.delete(k);
    plain = parsed.toString();
  }
  return { mode: 'single', url: plain, durability };
}

function parseSentinelUrl(url: string, flag: string, scheme: string): RedisTarget {
  const m = /^[a-z+]+:\/\/(?:([^@/?#]*)@)?([^/?#]+)\/([^/?#]+)(?:\/(\d+))?\/?(?:\?([^#]*))?$/i.exec(url);
  if (m === null)
    throw configError(
      flag,
      url,
      'expected redis+sentinel://[user:pass@]host:26379[,host:port…]/<primary name>',
    );
  const [, userinfo, hostList, rawName, dbPath, query] = m;
  const sentinels = hostList!.split(',').map((h) => {
    const hm = /^\[([^\]]+)\](?::(\d+))?$/.exec(h) ?? /^([^:[\]]+)(?::(\d+))?$/.exec(h);
    if (hm === null || hm[1] === '')
      throw configError(flag, url, `not a sentinel host[:port]: ${JSON.stringify(h)}`);
    const port =
      hm[2] === undefined ? DEFAULT_SENTINEL_PORT : intParam(flag, url, 'a sentinel port', hm[2], 1, 65535);
    return { host: hm[1]!, port };
  });
  const params = new URLSearchParams(query ?? '');
  for (const k of params.keys())
    if (!SENTINEL_PARAMS.has(k))
      throw configError(flag, url, `unknown parameter ${k} (known: ${[...SENTINEL_PARAMS].join(', ')})`);
  const target: RedisTarget = {
    mode: 'sentinel',
    name: decodeURIComponent(rawName!),
    sentinels,
    durability: durabilityOf(flag, url, params, 1),
    tls: scheme === 'rediss+sentinel',
  };
  if (userinfo !== undefined && userinfo !== '') {
    const colon = userinfo.indexOf(':');
    const user = decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(0, colon));
    const pass = colon < 0 ? '' : decodeURIComponent(userinfo.slice(colon + 1));
    if (colon < 0) target.password = user;
    else {
      if (user !== '') target.username = user;
      if (pass !== '') target.password = pass;
    }
  }
  const db = params.get('db') ?? dbPath;
  if (db !== undefined && db !== null) target.db = intParam(flag, url, 'db', db, 0, 1_000_000);
  const tls = params.get('tls');
  if (tls !== null) target.tls = boolParam(flag, url, 'tls', tls);
  const sTls = params.get('sentinelTls');
  if (sTls !== null) target.sentinelTls = boolParam(flag, url, 'sentinelTls', sTls);
  const su = params.get('sentinelUsername');
  if (su !== null && su !== '') target.sentinelUsername = su;
  const sp = params.get('sentinelPassword');
  if (sp !== null && sp !== '') target.sentinelPassword = sp;
  return target;
}

/** Checks `--redis` (see `parseRedisUrl`); throws a config error naming the flag. */
export function checkRedisUrl(url: string, flag = '--redis'): RedisTarget {
  return parseRedisUrl(url, flag);
}

/** Removes the passwords from a Redis URL (also a Sentinel set's) for logs and messages. */
export function redactRedisUrl(url: string): string {
  if (/^[a-z]+\+sentinel:\/\//i.test(url))
    return url
      .replace(/^([a-z+]+:\/\/)([^@/?#:]*):([^@/?#]*)@/i, (_all, s: string, u: string) => `${s}${u}:***@`)
      .replace(/^([a-z+]+:\/\/)([^@/?#:]+)@/i, (_all, s: string) => `${s}***@`)
      .replace(/([?&]sentinelPassword=)[^&#]*/g, '$1***');
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '<invalid url>';
  }
}

/** The ioredis options of a target (one Redis: parsed from the URL by ioredis itself). */
function ioredisOptions(target: RedisTarget, common: RedisOptions): RedisOptions {
  if (target.mode === 'single') return common;
  const o: RedisOptions = {
    ...common,
    sentinels: target.sentinels!,
    name: target.name!,
    role: 'master',
    // Failovers are watched by `watchSentinels` below (ioredis's own detector has no error
    // listener on its sentinel clients: a sentinel down would print to stderr forever).
    // Every sentinel unreachable: try them all again, backing off like the connection does.
    sentinelRetryStrategy: (times: number) => common.retryStrategy?.(times) ?? 1000,
    sentinelCommandTimeout: 1000,
  };
  if (target.username !== undefined) o.username = target.username;
  if (target.password !== undefined) o.password = target.password;
  if (target.db !== undefined) o.db = target.db;
  if (target.tls === true) {
    o.tls = {};
    o.enableTLSForSentinelMode = true;
  }
  if (target.sentinelTls === true) o.sentinelTLS = {};
  if (target.sentinelUsername !== undefined) o.sentinelUsername = target.sentinelUsername;
  if (target.sentinelPassword !== undefined) o.sentinelPassword = target.sentinelPassword;
  return o;
}

/**
 * Subscribes to `+switch-master` on every sentinel of `target` (each its own connection, retried
 * with `retryStrategy` while that sentinel is down) and calls `onSwitch` when `target.name`'s
 * primary changes: the connections then reconnect, which asks the sentinels for the new primary,
 * even when the old one is alive but unreachable (a partition) and its sockets stay open.
 * Returns how to stop watching.
 */
function watchSentinels(
  RedisClass: typeof import('ioredis').Redis,
  target: RedisTarget,
  common: RedisOptions,
  onSwitch: () => void,
): () => void {
  const watchers = target.sentinels!.map((s) => {
    const o: RedisOptions = {
      host: s.host,
      port: s.port,
      lazyConnect: true,
      connectTimeout: common.connectTimeout!,
      retryStrategy: common.retryStrategy!,
      enableReadyCheck: false,
    };
    if (target.sentinelUsername !== undefined) o.username = target.sentinelUsername;
    if (target.sentinelPassword !== undefined) o.password = target.sentinelPassword;
    if (target.sentinelTls === true) o.tls = {};
    const c = new RedisClass(o);
    c.on('error', () => {
      // this sentinel is down: the others still tell; this one is retried
    });
    c.on('message', (channel: string, message: string) => {
      if (channel === '+switch-master' && message.split(' ')[0] === target.name) onSwitch();
    });
    c.connect()
      .then(() => c.subscribe('+switch-master'))
      .catch(() => {
        // retried by the retry strategy; ioredis subscribes again on reconnection
      });
    return c;
  });
  return () => {
    for (const c of watchers) c.disconnect();
  };
}

/** `host:port` of the server a client's socket is connected to ('' when none). */
function peerOf(client: { stream?: { remoteAddress?: string; remotePort?: number } }): string {
  const s = client.stream;
  if (s?.remoteAddress === undefined || s.remotePort === undefined) return '';
  return s.remoteAddress.includes(':')
    ? `[${s.remoteAddress}]:${s.remotePort}`
    : `${s.remoteAddress}:${s.remotePort}`;
}

export async function connectRedis(url: string, options: RedisConnectOptions = {}): Promise<RedisConnection> {
  const flag = options.flag ?? '--redis';
  const target = parseRedisUrl(url, flag);
  const durability: RedisDurability = { ...target.durability, ...options.durability };
  const prefix = options.prefix ?? 'gamewire:';
  const connectTimeoutMs = options.connectTimeoutMs ?? 5000;
  const maxBackoffMs = options.maxBackoffMs ?? 2000;
  const { Redis: RedisClass } = await import('ioredis');
  const common: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: Math.min(connectTimeoutMs, 2000),
    retryStrategy: (attempt: number) => Math.min(50 * 2 ** Math.min(attempt, 10), maxBackoffMs),
    // Commands must not wait forever on a half-dead connection either.
    commandTimeout: 2000,
    // A primary demoted under us (a failover we were not told about yet) answers READONLY:
    // reconnect, which asks the sentinels again. The command itself fails (503), never resent.
    reconnectOnError: (err: Error) => /^(READONLY|MASTERDOWN|UNBLOCKED)/.test(err.message),
  };
  const redisOptions = ioredisOptions(target, common);
  const client =
    target.mode === 'single' ? new RedisClass(target.url!, redisOptions) : new RedisClass(redisOptions);
  const reconnectHooks = new Set<() => Promise<unknown>>();
  let up = false;
  let closing = false;
  let readyOnce = false;
  // Bumped on every close, so a reconnection's hooks that outlive it do not mark a later one up.
  let generation = 0;
  const stats = {
    primary: '',
    failovers: 0,
    lastFailoverSeconds: 0,
    durabilityErrors: 0,
    durableWrites: 0,
    downSince: undefined as number | undefined,
  };
  client.on('ready', () => {
    if (up) return;
    const seen = generation;
    const now = peerOf(client as never);
    const before = stats.primary;
    const markUp = () => {
      if (seen !== generation || up || closing) return;
      up = true;
      if (before !== '' && now !== '' && now !== before) {
        const downMs = stats.downSince === undefined ? 0 : Date.now() - stats.downSince;
        stats.failovers++;
        stats.lastFailoverSeconds = downMs / 1000;
        try {
          options.onPrimaryChange?.(before, now, downMs);
        } catch {
          // a listener threw: not ours to crash on
        }
      }
      if (now !== '') stats.primary = now;
      stats.downSince = undefined;
      options.onStatus?.(true);
    };
    if (!readyOnce || reconnectHooks.size === 0) {
      readyOnce = true;
      markUp();
      return;
    }
    // Each hook's commands are bounded by the command timeout; the cap is for a hook that hangs.
    let cap: NodeJS.Timeout | undefined;
    void Promise.race([
      Promise.allSettled([...reconnectHooks].map((hook) => Promise.resolve().then(hook))),
      new Promise((resolve) => {
        cap = setTimeout(resolve, 5000);
        cap.unref();
      }),
    ])
      .then(() => {
        clearTimeout(cap);
        markUp();
      })
      .catch(() => {
        // an onStatus listener threw: not ours to crash on
      });
  });
  client.on('error', () => {
    // Reported through 'close' below; without a listener ioredis would print to stderr.
  });
  client.on('close', () => {
    generation++;
    stats.downSince ??= Date.now();
    if (up && !closing) {
      up = false;
      options.onStatus?.(false);
    }
    up = false;
  });

  // The connection durable writes' WAIT runs on (see the module comment).
  const ack =
    durability.replicas > 0
      ? client.duplicate({ commandTimeout: durability.timeoutMs + 2000, lazyConnect: true })
      : undefined;
  ack?.on('error', () => {});

  const shown = redactRedisUrl(url);
  const ready = (c: InstanceType<typeof RedisClass>) =>
    new Promise<void>((resolve) => {
      c.once('ready', () => resolve());
      c.connect().catch(() => {
        // The retry strategy keeps trying until the timer below gives up.
      });
    });
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      Promise.all([ready(client), ...(ack === undefined ? [] : [ready(ack)])]),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${connectTimeoutMs} ms`)),
          connectTimeoutMs,
        );
      }),
    ]);
  } catch (err) {
    closing = true;
    client.disconnect();
    ack?.disconnect();
    const where =
      target.mode === 'sentinel'
        ? `no Redis primary "${target.name}" from the sentinels of ${shown}`
        : `no Redis at ${shown}`;
    throw new CommandError(
      'ERR_REDIS',
      `${where} (${(err as Error).message}): is redis-server${target.mode === 'sentinel' ? ' (and Sentinel)' : ''} running? Set the URL with ${flag}`,
      1,
      { cause: err },
    );
  } finally {
    clearTimeout(timer);
  }

  // Several sentinels announce one switch: act on the first; the reconnection asks them anyway.
  let lastSwitch = 0;
  const unwatch =
    target.mode === 'sentinel'
      ? watchSentinels(RedisClass, target, common, () => {
          if (closing || Date.now() - lastSwitch < 1000) return;
          lastSwitch = Date.now();
          for (const c of [client, ...(ack === undefined ? [] : [ack])])
            if (peerOf(c as never) !== '') c.disconnect(true);
        })
      : () => {};

  const gate =
    ack === undefined
      ? undefined
      : new DurabilityGate(
          ack,
          `${prefix}fleet:durable-mark`,
          durability,
          () => ({ generation, peer: peerOf(client as never) }),
          () => peerOf(ack as never),
        );

  // ioredis's overloads are wider than RedisClient's; each of RedisClient's calls is one of them.
  const commands: RedisClient = client as unknown as RedisClient;
  return {
    client: commands,
    url,
    prefix,
    get up() {
      return up;
    },
    durability,
    onReconnect(hook) {
      reconnectHooks.add(hook);
      return () => {
        reconnectHooks.delete(hook);
      };
    },
    async durable<T>(what: string, fn: () => Promise<T>): Promise<T> {
      const sentOn = generation;
      const result = await storeCall(what, fn);
      if (gate === undefined) return result;
      try {
        await gate.confirm(what, sentOn);
      } catch (err) {
        stats.durabilityErrors++;
        throw err;
      }
      stats.durableWrites++;
      return result;
    },
    state: () => ({
      mode: target.mode,
      up,
      primary: stats.primary,
      failovers: stats.failovers,
      lastFailoverSeconds: stats.lastFailoverSeconds,
      durabilityErrors: stats.durabilityErrors,
      durableWrites: stats.durableWrites,
      waitReplicas: durability.replicas,
    }),
    async close() {
      closing = true;
      unwatch();
      await Promise.all(
        [client, ...(ack === undefined ? [] : [ack])].map(async (c) => {
          try {
            await c.quit();
          } catch {
            c.disconnect();
          }
        }),
      );
    },
  };
}

interface AckClient {
  incr(key: string): Promise<number>;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
}

/**
 * Group commit of WAITs: every write answered before a round starts is covered by that round
 * (`INCR mark`, then `WAIT replicas timeout`, on the ack connection); writes answered while a
 * round runs wait for the next one. A waiter whose write was sent on an earlier connection of
 * the main client than the current one (it reconnected since: possibly to another server), or
 * whose main client is on another server than the ack connection, is refused.
 */
class DurabilityGate {
  private queue: { what: string; gen: number; resolve: () => void; reject: (e: Error) => void }[] = [];
  private running = false;

  private readonly ack: AckClient;
  private readonly markKey: string;
  private readonly d: RedisDurability;
  private readonly main: () => { generation: number; peer: string };
  private readonly ackPeer: () => string;

  constructor(
    ack: AckClient,
    markKey: string,
    d: RedisDurability,
    main: () => { generation: number; peer: string },
    ackPeer: () => string,
  ) {
    this.ack = ack;
    this.markKey = markKey;
    this.d = d;
    this.main = main;
    this.ackPeer = ackPeer;
  }

  confirm(what: string, gen: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ what, gen, resolve, reject });
      this.kick();
    });
  }

  private kick(): void {
    if (this.running || this.queue.length === 0) return;
    this.running = true;
    const batch = this.queue.splice(0);
    void this.round()
      .then((failure) => {
        const m = this.main();
        for (const w of batch) {
          let why = failure;
          if (why === undefined && w.gen !== m.generation)
            why = 'the connection to Redis was lost after the write';
          if (why !== undefined)
            w.reject(new StoreNotDurableError(`the write could not be made durable (${w.what}): ${why}`));
          else w.resolve();
        }
      })
      .finally(() => {
        this.running = false;
        this.kick();
      });
  }

  /** One round; undefined when every write answered before it is on enough replicas. */
  private async round(): Promise<string | undefined> {
    try {
      await this.ack.incr(this.markKey);
      const acked = Number(await this.ack.call('WAIT', this.d.replicas, this.d.timeoutMs));
      const mainPeer = this.main().peer;
      const ackPeer = this.ackPeer();
      if (mainPeer === '' || mainPeer !== ackPeer)
        return `the primary changed (${mainPeer || 'none'} / ${ackPeer || 'none'})`;
      if (acked < this.d.replicas)
        return `${acked} of ${this.d.replicas} replica(s) confirmed it within ${this.d.timeoutMs} ms`;
      return undefined;
    } catch (err) {
      return `the replica wait failed: ${(err as Error).message}`;
    }
  }
}

/**
 * Runs a store command, turning "Redis cannot answer now" into `StoreUnavailableError` (a 503 for
 * an HTTP caller). Other errors (a bug, a wrong type) pass through.
 */
export async function storeCall<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof StoreUnavailableError) throw err;
    const message = (err as Error).message ?? '';
    if (
      /Stream isn't writeable|enableOfflineQueue|Connection is closed|Command timed out|ECONNREFUSED|ECONNRESET|max retries|MaxRetriesPerRequest|LOADING|CLUSTERDOWN|TRYAGAIN|READONLY|MASTERDOWN|NOREPLICAS|UNBLOCKED|sentinels are unreachable/i.test(
        message,
      )
    ) {
      throw new StoreUnavailableError(`the store is unavailable (${what}): ${message}`, { cause: err });
    }
    throw err;
  }
}

/**
 * A write whose acknowledgement must survive the loss of the primary (an allocation, a join code,
 * an account, a session): `storeCall`, then, when the connection asks for replicas, a wait until
 * they hold it. Throws `StoreNotDurableError` (a `StoreUnavailableError`: 503) when they do not
 * in time. Every durable write gamewire makes is safe to retry.
 */
export function durableCall<T>(redis: RedisConnection, what: string, fn: () => Promise<T>): Promise<T> {
  return redis.durable === undefined ? storeCall(what, fn) : redis.durable(what, fn);
}
