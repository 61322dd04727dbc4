/**
 * `gamewire load unity-relay`: games of a host and its joiners, as Unity games do it through the
 * Relay service: the host allocates and gets a join code from the allocation API, each joiner
 * joins with the code; all of them bind over the chosen transport (udp, dtls, ws, wss), joiners
 * connect to the host, then everyone relays to the host and the host to everyone at a rate and
 * size, until the game ends (churn, or the end of the run).
 *
 * Every RELAY carries a sequence number, the sender, the send time, a CRC-32 of the whole payload
 * and a byte pattern derived from the sequence number; receivers measure latency and loss per
 * sender and check every byte (the CRC catches any flipped bit, header included; a changed byte
 * is an integrity violation). `--api` may list several allocators (a fleet):
 * games take them in turn, and go to the relay node each allocation names.
 */
import { readFileSync } from 'node:fs';
import { UsageError } from '../../core/errors.js';
import {
  type LoadClient,
  type LoadDefinition,
  type LoadRun,
  pause,
  SequenceTracker,
  untilStopped,
} from '../../core/load/index.js';
import { crc32 } from '../../wire/index.js';
import {
  type ConnectionType,
  RelayApiClient,
  type RelayServerData,
  relayServerData,
  UnityRelayClient,
  type UnityRelayClientOptions,
} from './client.js';
import { RelayApiError, RelayClientError } from './errors.js';
import { RELAY_HEADER_LENGTH, RelayErrorCode } from './messages.js';
import {
  DEFAULT_API_PORT,
  DEFAULT_DTLS_PORT,
  DEFAULT_RELAY_PORT,
  DEFAULT_WS_PORT,
  DEFAULT_WSS_PORT,
} from './options.js';

/** Each transport's port on a relay that `gamewire serve` started with its defaults. */
const TRANSPORT_PORTS: Record<ConnectionType, number> = {
  udp: DEFAULT_RELAY_PORT,
  dtls: DEFAULT_DTLS_PORT,
  ws: DEFAULT_WS_PORT,
  wss: DEFAULT_WSS_PORT,
};

/**
 * seq u32, sender u32, send time f64 (ms on this process's clock), the payload's CRC-32 (u32),
 * then the pattern.
 */
const PAYLOAD_HEADER = 20;
/** Where the CRC-32 sits; it covers every other byte of the payload. */
const DIGEST_AT = 16;

/**
 * The CRC-32 (zlib's) of a RELAY payload: every byte but the four that carry it. A CRC catches
 * every single flipped bit and every burst up to 32 bits; the pattern alone would not notice a
 * changed header (a sequence bit above the eighth, the send time). No allocation.
 */
export function relayDigest(data: Uint8Array, length = data.length): number {
  if (length <= DIGEST_AT) return crc32(data, 0, length);
  return crc32(data, Math.min(DIGEST_AT + 4, length), length, crc32(data, 0, DIGEST_AT));
}

/** Fills `payload` as message `seq` of `sender` sent at `sentMs`, digest included. */
export function fillRelayPayload(payload: Buffer, seq: number, sender: number, sentMs: number): void {
  payload.writeUInt32LE(seq, 0);
  payload.writeUInt32LE(sender, 4);
  payload.writeDoubleLE(sentMs, 8);
  for (let i = PAYLOAD_HEADER; i < payload.length; i++) payload[i] = patternByte(seq, sender, i);
  payload.writeUInt32LE(relayDigest(payload), DIGEST_AT);
}

/**
 * What is wrong with a received RELAY payload, or undefined when it is intact: its length, its
 * CRC-32, or a pattern byte.
 */
export function relayPayloadFault(b: Buffer): string | undefined {
  if (b.length < PAYLOAD_HEADER) return `${b.length}-byte message`;
  const seq = b.readUInt32LE(0);
  const sender = b.readUInt32LE(4);
  if (b.readUInt32LE(DIGEST_AT) !== relayDigest(b)) return `the CRC of #${seq} from player ${sender}`;
  for (let i = PAYLOAD_HEADER; i < b.length; i++)
    if (b[i] !== patternByte(seq, sender, i)) return `byte ${i} of #${seq} from player ${sender}`;
  return undefined;
}

interface UnityLoadOptions {
  apis: string[];
  apiKey: string | undefined;
  transport: ConnectionType;
  players: number;
  relayRate: number;
  relayBytes: number;
  tls: UnityRelayClientOptions['tls'];
}

/**
 * A 429 the API kept answering after the retries: what the load's user can do about it. Its
 * limits are per client address (allocations a minute, live allocations), and a load comes from
 * one address unless `--from` spreads it; the API key lifts them on a relay that has one.
 */
function throttledError(err: RelayApiError, fromCount: number): RelayClientError {
  return new RelayClientError(
    'ERR_RELAY_API_THROTTLED',
    `${err.message} (still after 3 retries): wait and run again, spread the games over more source ` +
      `addresses (--from 127.0.0.2-9${fromCount > 0 ? `, now ${fromCount}` : ''}: the limits are per address), ` +
      "or pass --api-key with the relay's API key (serve --api-key; keyed callers have no per-address limits)",
    { cause: err },
  );
}

/** The pattern byte at `i` of message `seq` (header bytes excluded). */
function patternByte(seq: number, sender: number, i: number): number {
  return (seq * 7 + sender * 13 + i) & 0xff;
}

async function prepare(run: LoadRun) {
  const raw = run.options;
  const target = run.settings.target;
  const apis = (raw.api as string[] | undefined) ?? [];
  if (apis.length === 0) {
    if (target === undefined)
      throw new UsageError('gamewire load unity-relay needs --target HOST:PORT or --api URL');
    apis.push(`http://${target.host.includes(':') ? `[${target.host}]` : target.host}:${DEFAULT_API_PORT}`);
  }
  for (const api of apis) {
    let u: URL;
    try {
      u = new URL(api);
    } catch {
      throw new UsageError(`--api: "${api}" is not a URL`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:')
      throw new UsageError(`--api: "${api}" is not http(s)`);
    await run.allow(u.hostname, '--api');
  }
  let tls: UnityRelayClientOptions['tls'];
  // `--ca`/`--insecure`, as conform and the chat client spell them (`tlsCa`/`tlsInsecure`: the
  // former names, still accepted from code).
  const ca = raw.ca ?? raw.tlsCa;
  if (typeof ca === 'string') {
    try {
      tls = { ca: readFileSync(ca) };
    } catch (err) {
      throw new UsageError(`--ca: cannot read ${ca}: ${(err as Error).message}`);
    }
  } else if (raw.insecure === true || raw.tlsInsecure === true) tls = { rejectUnauthorized: false };
  const o: UnityLoadOptions = {
    apis,
    apiKey: (raw.apiKey as string | undefined) ?? process.env.GAMEWIRE_UNITY_RELAY_API_KEY,
    transport: raw.transport as ConnectionType,
    players: raw.players as number,
    relayRate: raw.relayRate as number,
    relayBytes: raw.relayBytes as number,
    tls,
  };
  const { stats } = run;
  const from = run.settings.from;
  const join = stats.latency('join');
  const relay = stats.latency('relay');
  const sent = stats.counter('relaysSent');
  const received = stats.counter('relaysReceived');
  const lost = stats.counter('lost');
  const expected = stats.counter('expected');
  const duplicates = stats.counter('duplicates');
  const rebinds = stats.counter('rebinds');
  const throttled = stats.counter('apiThrottled');
  const games = stats.counter('games');
  const origin = performance.now();
  const wireBytes = o.relayBytes + RELAY_HEADER_LENGTH;

  /** One API call, retried after a 429 (at most three times, 1 s, 2 s, 3 s apart) as an SDK would. */
  const withRetry = async <T>(call: () => Promise<T>, signal: AbortSignal): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!(err instanceof RelayApiError) || err.status !== 429 || signal.aborted) throw err;
        if (attempt > 3) throw throttledError(err, from.length);
        throttled.add();
        await pause(1000 * attempt, signal);
      }
    }
  };

  const endpoint = async (allocation: Parameters<typeof relayServerData>[0]): Promise<RelayServerData> => {
    const data = relayServerData(allocation, o.transport);
    if (target !== undefined) return { ...data, host: target.host, port: target.port };
    await run.allow(data.host, 'the allocation');
    return data;
  };

  const session = async (client: LoadClient): Promise<void> => {
    const started = performance.now();
    const api = new RelayApiClient(o.apis[client.index % o.apis.length]!, {
      apiKey: o.apiKey,
      localAddress: from.length === 0 ? undefined : from[(client.slot * o.players) % from.length],
    });
    const players: UnityRelayClient[] = [];
    const trackers = new Map<string, SequenceTracker>();
    const timers: NodeJS.Timeout[] = [];
    let fail: ((err: Error) => void) | undefined;
    let failedEarly: Error | undefined;
    const failWith = (err: Error) => {
      if (fail !== undefined) fail(err);
      else failedEarly ??= err;
    };
    const stopAll = () => {
      for (const p of players) void p.close({ sendClose: false });
    };
    client.signal.addEventListener('abort', stopAll, { once: true });

    const watch = (p: UnityRelayClient, who: number) => {
      p.on('error', () => {});
      p.on('rebind', () => rebinds.add());
      p.on('relayError', (code: number) => {
        if (code === RelayErrorCode.ALLOCATION_NOT_FOUND || code === RelayErrorCode.TIMEOUT)
          failWith(
            new RelayClientError(
              'ERR_RELAY_ERROR',
              `the relay answered ERROR ${code}: the allocation is gone`,
            ),
          );
      });
      p.on('message', (data: Buffer, fromId: Buffer) => {
        stats.bytesIn.add(data.length + RELAY_HEADER_LENGTH);
        const fault = relayPayloadFault(data);
        if (fault !== undefined) {
          stats.violation('corrupt_relay', fault);
          return;
        }
        const seq = data.readUInt32LE(0);
        const sender = data.readUInt32LE(4);
        received.add();
        const key = `${who}<${fromId.toString('hex')}`;
        let t = trackers.get(key);
        if (t === undefined) {
          t = new SequenceTracker();
          trackers.set(key, t);
        }
        if (!t.see(seq)) {
          // UDP may deliver twice; a WebSocket relay never should.
          if (o.transport === 'ws' || o.transport === 'wss')
            stats.violation('duplicate_relay', `#${seq} from player ${sender}`);
          return;
        }
        relay.record(performance.now() - origin - data.readDoubleLE(8));
      });
    };

    const options = (p: number): UnityRelayClientOptions => ({
      connectionType: o.transport,
      ...(from.length === 0 ? {} : { localAddress: from[(client.slot * o.players + p) % from.length] }),
      ...(o.tls === undefined ? {} : { tls: o.tls }),
    });

    // A DTLS handshake that times out (a lossy path losing one flight several times) is started
    // again, as UTP does within its connect attempts; up to three handshakes per player.
    const bound = async (ep: Awaited<ReturnType<typeof endpoint>>, p: number): Promise<UnityRelayClient> => {
      client.step(`BIND over ${o.transport} to ${ep.host}:${ep.port} (player ${p})`);
      for (let attempt = 1; ; attempt++) {
        const player = new UnityRelayClient(ep, options(p));
        players.push(player);
        watch(player, p);
        try {
          await player.bind();
          return player;
        } catch (err) {
          const timedOut = (err as { code?: unknown }).code === 'ERR_DTLS_TIMEOUT';
          if (!timedOut || attempt >= 3 || client.signal.aborted) throw err;
          players.splice(players.indexOf(player), 1);
          await player.close({ sendClose: false }).catch(() => {});
        }
      }
    };

    try {
      const apiUrl = o.apis[client.index % o.apis.length]!;
      client.step(`allocate at ${apiUrl}`);
      const allocation = await withRetry(() => api.allocate(o.players - 1), client.signal);
      client.step(`get a join code at ${apiUrl}`);
      const joinCode = await withRetry(() => api.joinCode(allocation.allocationId), client.signal);
      await bound(await endpoint(allocation), 0);
      for (let p = 1; p < o.players; p++) {
        if (client.signal.aborted) return;
        client.step(`join with the code at ${apiUrl}`);
        const joined = await withRetry(() => api.join(joinCode), client.signal);
        const joiner = await bound(await endpoint(joined), p);
        client.step(`CONNECT_REQUEST to the host over ${o.transport} (player ${p})`);
        await joiner.connect();
      }
      client.signal.removeEventListener('abort', stopAll);
      if (client.signal.aborted) return;
      join.record(performance.now() - started);
      client.joined();
      games.add();
      // Each player sends at the rate, out of phase: joiners to the host, the host to each joiner.
      const period = 1000 / o.relayRate;
      players.forEach((p, index) => {
        const sender = client.index * o.players + index;
        const payload = Buffer.alloc(o.relayBytes);
        // One numbered stream per recipient, so each receiver can count what it missed.
        const seqs = new Map<string, number>();
        const tick = () => {
          if (p.state !== 'bound') return;
          const recipients = index === 0 ? [...p.peers.values()] : p.hostId === undefined ? [] : [p.hostId];
          for (const to of recipients) {
            const hex = to.toString('hex');
            const seq = seqs.get(hex) ?? 0;
            seqs.set(hex, seq + 1);
            fillRelayPayload(payload, seq, sender, performance.now() - origin);
            try {
              p.send(payload, to);
              sent.add();
              stats.bytesOut.add(wireBytes);
            } catch (err) {
              failWith(err as Error);
            }
          }
        };
        const first = setTimeout(() => {
          tick();
          timers.push(setInterval(tick, period));
        }, Math.random() * period);
        timers.push(first);
      });
      await untilStopped(client.signal, (reject) => {
        fail = reject;
        if (failedEarly !== undefined) reject(failedEarly);
      });
    } finally {
      client.signal.removeEventListener('abort', stopAll);
      for (const t of timers) {
        clearTimeout(t);
        clearInterval(t);
      }
      for (const t of trackers.values()) {
        lost.add(t.lost);
        expected.add(t.expected);
        duplicates.add(t.duplicates);
      }
      // Joiners say goodbye to the host, then everyone closes (CLOSE frees the allocation).
      for (const p of players.slice(1)) {
        try {
          if (p.state === 'bound') p.disconnect();
        } catch {
          // Already gone.
        }
      }
      await Promise.allSettled(players.map((p) => p.close()));
    }
  };

  return {
    session,
    report: () => ({
      relayLossPercent: expected.n === 0 ? 0 : Math.round((lost.n / expected.n) * 1e6) / 1e4,
    }),
  };
}

export const unityRelayLoad: LoadDefinition = {
  summary:
    'games of a host and joiners: allocate, join code, join, bind over udp/dtls/ws/wss, relay at a rate',
  clientNoun: 'game',
  defaultPort: DEFAULT_RELAY_PORT,
  defaultPortFor: (options) => TRANSPORT_PORTS[(options.transport as ConnectionType | undefined) ?? 'udp'],
  defaultPortHelp: `the --transport's port when only a host is given: udp ${DEFAULT_RELAY_PORT}, dtls ${DEFAULT_DTLS_PORT}, ws ${DEFAULT_WS_PORT}, wss ${DEFAULT_WSS_PORT}`,
  targetOptional: true,
  options: [
    {
      flag: '--api <urls>',
      key: 'api',
      description:
        'allocation API base URLs, games take them in turn (a fleet); default http://<target host>:37080. ' +
        'Without --target, players bind where each allocation says',
      type: 'list',
    },
    {
      flag: '--api-key <key>',
      key: 'apiKey',
      description: 'Bearer key for the allocation API (or GAMEWIRE_UNITY_RELAY_API_KEY)',
      type: 'string',
      secret: true,
    },
    {
      flag: '--transport <t>',
      key: 'transport',
      description:
        "udp, dtls, ws or wss: the allocation endpoint each player binds to (--target is that endpoint's address; a bare host takes the transport's default port)",
      type: 'string',
      choices: ['udp', 'dtls', 'ws', 'wss'],
      default: 'udp',
    },
    {
      flag: '--players <n>',
      key: 'players',
      description: 'players per game: the host and its joiners (2: a host/join pair)',
      type: 'int',
      min: 2,
      max: 100,
      default: 2,
    },
    {
      flag: '--relay-rate <hz>',
      key: 'relayRate',
      description: 'RELAY messages per second from each player to each peer it talks to',
      type: 'number',
      min: 0.1,
      max: 10_000,
      default: 20,
    },
    {
      flag: '--relay-bytes <n>',
      key: 'relayBytes',
      description: 'application bytes in each RELAY (at least 20: number, sender, send time, CRC-32)',
      type: 'int',
      min: PAYLOAD_HEADER,
      max: 1300,
      default: 64,
    },
    {
      flag: '--ca <file>',
      key: 'ca',
      aliases: ['--tls-ca <file>'],
      description: "wss: trust this CA certificate (PEM), e.g. the relay data folder's self-signed one",
      type: 'string',
    },
    {
      flag: '--insecure',
      key: 'insecure',
      aliases: ['--tls-insecure'],
      description: 'wss: accept any certificate (a loopback test against a self-signed relay)',
      type: 'bool',
    },
  ],
  progress: { rates: ['relaysReceived'], latencies: ['relay'] },
  prepare,
};
