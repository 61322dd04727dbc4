/**
 * The one way gamewire talks to Redis (the control plane of a scaled-out fleet: nodes,
 * allocations, join codes, accounts, sessions). Never used on a per-packet path.
 *
 * Choices, for every store built on it:
 * - ioredis is loaded only when a server is started with `--redis` (the embedded defaults never
 *   load it);
 * - start-up waits for the first connection (`connectTimeoutMs`) and fails with one line naming
 *   the URL and the flag, so `--redis redis://typo` never looks like a working server;
 * - after that, an outage never ends the process: ioredis reconnects on its own (backoff up to
 *   `maxBackoffMs`), and commands fail at once while it is down (no offline queue, one try per
 *   command), so a caller can answer 503 instead of hanging;
 * - when the connection is back, the `onReconnect` hooks run first (a node's heartbeat), and only
 *   then does `up` turn true, so a store that waits for `up` never speaks before its node has
 *   re-announced itself;
 * - every key is under `prefix` (default `gamewire:`), so several fleets can share one Redis.
 */
import type { RedisOptions } from 'ioredis';
import { CommandError } from './errors.js';

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
  close(): Promise<void>;
}

/** Thrown by stores when Redis cannot answer now (down, or a command timed out): HTTP 503. */
export class StoreUnavailableError extends CommandError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORE_UNAVAILABLE', message, 1, options);
  }

  override get name(): string {
    return 'StoreUnavailableError';
  }
}

/** `redis://[user:pass@]host[:port][/db]` or `rediss://…` (TLS); anything else is refused. */
export function checkRedisUrl(url: string, flag = '--redis'): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CommandError('ERR_CONFIG', `${flag} ${url}: not a URL (expected redis://host:port)`, 2);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:')
    throw new CommandError(
      'ERR_CONFIG',
      `${flag} ${url}: expected a redis:// or rediss:// URL, got ${parsed.protocol}`,
      2,
    );
  return parsed;
}

/** Removes the password from a Redis URL for logs and messages. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '<invalid url>';
  }
}

export async function connectRedis(url: string, options: RedisConnectOptions = {}): Promise<RedisConnection> {
  const flag = options.flag ?? '--redis';
  checkRedisUrl(url, flag);
  const connectTimeoutMs = options.connectTimeoutMs ?? 5000;
  const maxBackoffMs = options.maxBackoffMs ?? 2000;
  const { Redis: RedisClass } = await import('ioredis');
  const redisOptions: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: Math.min(connectTimeoutMs, 2000),
    retryStrategy: (attempt: number) => Math.min(50 * 2 ** Math.min(attempt, 10), maxBackoffMs),
    // Commands must not wait forever on a half-dead connection either.
    commandTimeout: 2000,
  };
  const client = new RedisClass(url, redisOptions);
  const reconnectHooks = new Set<() => Promise<unknown>>();
  let up = false;
  let closing = false;
  let readyOnce = false;
  // Bumped on every close, so a reconnection's hooks that outlive it do not mark a later one up.
  let generation = 0;
  client.on('ready', () => {
    if (up) return;
    const seen = generation;
    const markUp = () => {
      if (seen !== generation || up || closing) return;
      up = true;
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
    if (up && !closing) {
      up = false;
      options.onStatus?.(false);
    }
    up = false;
  });

  const shown = redactRedisUrl(url);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no answer within ${connectTimeoutMs} ms`)),
        connectTimeoutMs,
      );
      client.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
      client.connect().catch(() => {
        // The retry strategy keeps trying until the timer above gives up.
      });
    });
  } catch (err) {
    closing = true;
    client.disconnect();
    throw new CommandError(
      'ERR_REDIS',
      `no Redis at ${shown} (${(err as Error).message}): is redis-server running? Set the URL with ${flag}`,
      1,
      { cause: err },
    );
  }

  // ioredis's overloads are wider than RedisClient's; each of RedisClient's calls is one of them.
  const commands: RedisClient = client as unknown as RedisClient;
  return {
    client: commands,
    url,
    prefix: options.prefix ?? 'gamewire:',
    get up() {
      return up;
    },
    onReconnect(hook) {
      reconnectHooks.add(hook);
      return () => {
        reconnectHooks.delete(hook);
      };
    },
    async close() {
      closing = true;
      try {
        await client.quit();
      } catch {
        client.disconnect();
      }
    },
  };
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
      /Stream isn't writeable|enableOfflineQueue|Connection is closed|Command timed out|ECONNREFUSED|ECONNRESET|max retries|MaxRetriesPerRequest|LOADING|CLUSTERDOWN|TRYAGAIN/i.test(
        message,
      )
    ) {
      throw new StoreUnavailableError(`the store is unavailable (${what}): ${message}`, { cause: err });
    }
    throw err;
  }
}
