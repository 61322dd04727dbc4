/**
 * `UnityRelayClient`: a Relay client that behaves like Unity Transport 2.x: BIND with
 * retries (nonce incremented after every BIND sent), PING keep-alive, re-BIND after silence,
 * CONNECT_REQUEST with retries until ACCEPTED, RELAY both ways, DISCONNECT, CLOSE. It carries
 * application bytes in RELAY as they are (no UTP connection layer inside). Transports: `udp`,
 * `dtls` (DTLS 1.2 PSK: identity = the allocation id bytes, key = the allocation key), `ws` and
 * `wss` (one relay message per binary frame), picked like UTP picks them: by `connectionType`.
 *
 * `RelayApiClient` talks to the allocation API (ours, or anything shaped like Unity's).
 */
import dgram from 'node:dgram';
import { lookup } from 'node:dns/promises';
import { EventEmitter } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { WebSocket } from 'ws';
import { ConfigError } from '../../core/errors.js';
import { DtlsClient } from '../../transports/dtls/index.js';
import { DecodeError, EncodeError, ErrorCode } from '../../wire/errors.js';
import { toHex } from '../../wire/hex.js';
import type { AllocationJson } from './api.js';
import { RelayApiError, RelayClientError } from './errors.js';
import {
  ALLOCATION_ID_LENGTH,
  BIND_SIGNED_LENGTH,
  bindHmac,
  CONNECTION_DATA_LENGTH,
  decodeMessage,
  encodeMessage,
  HMAC_KEY_LENGTH,
  padConnectionData,
  RELAY_HEADER_LENGTH,
  RelayErrorCode,
  type RelayMessage,
} from './messages.js';

export type ConnectionType = 'udp' | 'dtls' | 'ws' | 'wss';

/** What a client needs to reach the relay: Unity's `RelayServerData`, from an allocation. */
export interface RelayServerData {
  host: string;
  port: number;
  /** Which transport (default `udp`). */
  connectionType?: ConnectionType;
  /** The endpoint's `secure` flag: UTP switches (D)TLS on from it, not from the type string. */
  secure?: boolean;
  allocationId: Buffer;
  key: Buffer;
  connectionData: Buffer;
  /** The host's connection data (own data for a host). */
  hostConnectionData: Buffer;
}

/**
 * Builds `RelayServerData` from allocation JSON the way `new RelayServerData(allocation, "udp")`
 * does: the last endpoint of that connection type, the id from `allocationIdBytes`.
 */
export function relayServerData(
  allocation: AllocationJson,
  connectionType: ConnectionType = 'udp',
): RelayServerData {
  const endpoint = allocation.serverEndpoints.filter((e) => e.connectionType === connectionType).at(-1);
  if (endpoint === undefined)
    throw new RelayClientError('ERR_RELAY_NO_ENDPOINT', `the allocation has no "${connectionType}" endpoint`);
  const allocationId = Buffer.from(allocation.allocationIdBytes, 'base64');
  const key = Buffer.from(allocation.key, 'base64');
  const connectionData = padConnectionData(Buffer.from(allocation.connectionData, 'base64'));
  const hostConnectionData =
    allocation.hostConnectionData === undefined
      ? connectionData
      : padConnectionData(Buffer.from(allocation.hostConnectionData, 'base64'));
  if (allocationId.length !== ALLOCATION_ID_LENGTH)
    throw new EncodeError(ErrorCode.BAD_INPUT, 'allocationIdBytes must be 16 bytes');
  if (key.length !== HMAC_KEY_LENGTH)
    throw new EncodeError(ErrorCode.BAD_INPUT, 'key must be 64 bytes (RelayHMACKey)');
  return {
    host: endpoint.host,
    port: endpoint.port,
    connectionType,
    secure: endpoint.secure,
    allocationId,
    key,
    connectionData,
    hostConnectionData,
  };
}

/** A BIND exactly as UTP writes it, HMAC included. */
export function createBind(nonce: number, connectionData: Uint8Array, key: Uint8Array): Buffer {
  const bytes = encodeMessage({
    type: 'BIND',
    acceptMode: 0,
    nonce,
    connectionDataLength: CONNECTION_DATA_LENGTH,
    connectionData: padConnectionData(connectionData),
    hmac: Buffer.alloc(32),
  });
  bindHmac(key, bytes.subarray(0, BIND_SIGNED_LENGTH)).copy(bytes, BIND_SIGNED_LENGTH);
  return bytes;
}

/** How long an allocation API request may take, answer included. */
export const DEFAULT_API_TIMEOUT_MS = 10_000;

/** Client of the allocation API (`/v1/allocate`, `/v1/joincode`, `/v1/join`, `/v1/regions`). */
export class RelayApiClient {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly timeoutMs: number;
  private readonly localAddress: string | undefined;

  /**
   * `timeoutMs` (default 10 s) bounds each request, answer included: something that accepts the
   * connection and never answers fails with `ERR_RELAY_API_TIMEOUT` instead of hanging.
   * `localAddress`: send the requests from this address (a load generator spreading its players
   * over several addresses); they then go through node:http rather than fetch.
   */
  constructor(
    baseUrl: string,
    options: { apiKey?: string | undefined; timeoutMs?: number; localAddress?: string | undefined } = {},
  ) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_API_TIMEOUT_MS;
    this.localAddress = options.localAddress;
  }

  async allocate(maxConnections: number, region?: string): Promise<AllocationJson> {
    const body: Record<string, unknown> = { maxConnections };
    if (region !== undefined) body.region = region;
    const res = (await this.call('POST', '/v1/allocate', body)) as { data: { allocation: AllocationJson } };
    return res.data.allocation;
  }

  async joinCode(allocationId: string): Promise<string> {
    const res = (await this.call('POST', '/v1/joincode', { allocationId })) as { data: { joinCode: string } };
    return res.data.joinCode;
  }

  async join(joinCode: string): Promise<AllocationJson> {
    const res = (await this.call('POST', '/v1/join', { joinCode })) as {
      data: { allocation: AllocationJson };
    };
    return res.data.allocation;
  }

  async regions(): Promise<{ id: string; description: string }[]> {
    const res = (await this.call('GET', '/v1/regions')) as {
      data: { regions: { id: string; description: string }[] };
    };
    return res.data.regions;
  }

  private async call(method: string, path: string, body?: unknown): Promise<unknown> {
    const headers: Record<string, string> = { accept: 'application/json, application/problem+json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let status: number;
    let text: string;
    try {
      if (this.localAddress === undefined) {
        const res = await fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          signal: AbortSignal.timeout(this.timeoutMs),
          ...(payload !== undefined ? { body: payload } : {}),
        });
        status = res.status;
        text = await res.text();
      } else {
        ({ status, text } = await requestFrom(
          this.localAddress,
          method,
          `${this.baseUrl}${path}`,
          headers,
          payload,
          this.timeoutMs,
        ));
      }
    } catch (err) {
      if ((err as Error).name === 'TimeoutError')
        throw new RelayClientError(
          'ERR_RELAY_API_TIMEOUT',
          `the allocation API at ${this.baseUrl} did not answer ${method} ${path} within ${this.timeoutMs} ms`,
          { cause: err },
        );
      throw err;
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    if (status < 200 || status > 299) throw new RelayApiError(status, json);
    return json;
  }
}

/** One HTTP request sent from `localAddress` (what fetch cannot do without another dependency). */
function requestFrom(
  localAddress: string,
  method: string,
  url: string,
  headers: Record<string, string>,
  body: string | undefined,
  timeoutMs: number,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const lib = u.protocol === 'https:' ? https : http;
    const req = lib.request(
      u,
      {
        method,
        localAddress,
        headers:
          body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    // The whole exchange, answer included, like fetch with AbortSignal.timeout.
    const timer = setTimeout(() => {
      const err = new Error(`no answer from ${u.host} within ${timeoutMs} ms`);
      err.name = 'TimeoutError';
      req.destroy(err);
    }, timeoutMs);
    req.on('close', () => clearTimeout(timer));
    req.on('error', reject);
    req.end(body);
  });
}

export interface UnityRelayClientOptions {
  /** BIND and CONNECT_REQUEST retry period (UTP `connectTimeoutMS`). Default 1000. */
  retryMs?: number;
  /** Attempts before giving up (UTP `maxConnectAttempts`). Default 60. */
  maxAttempts?: number;
  /** Keep-alive: PING when nothing was sent for this long (UTP `RelayConnectionTimeMS`). Default 3000. */
  pingIntervalMs?: number;
  /**
   * Once bound, the relay counts as gone when nothing at all has come from it for this long:
   * PINGs and the re-BINDs sent after 3 silent ping periods unanswered (UTP's
   * `disconnectTimeoutMS`). Then `relayLost` is emitted and the client is closed. Must be more
   * than 3 × `pingIntervalMs` (a live relay has answered a re-BIND by then); 0 never gives up.
   * Default 30000.
   */
  relayTimeoutMs?: number;
  /** First nonce (UTP: 0). */
  nonce?: number;
  /** Local address to bind the UDP socket to. Default: any. */
  localAddress?: string;
  /** Transport for `host()`/`join()` (the allocation's endpoint of that type). Default `udp`. */
  connectionType?: ConnectionType;
  /** wss: trust these CAs (PEM) instead of the system's, or (for local tests only) trust anything. */
  tls?: { ca?: string | Buffer; rejectUnauthorized?: boolean };
  /** dtls: handshake time limit. Default 10 s. */
  dtlsTimeoutMs?: number;
}

/** One open transport to the relay: sends one relay message as one datagram, record or frame. */
interface ClientLink {
  /** `sent` runs once the message has left (or was lost). */
  send(bytes: Buffer, sent?: () => void): void;
  /** Sends what is queued, then closes. */
  close(): Promise<void>;
  readonly localPort: number;
}

export type ClientState = 'idle' | 'binding' | 'bound' | 'closed';

/** What each relay ERROR code means (Unity's RelayMessageError), for messages. */
const ERROR_MEANING: Record<number, string> = {
  0: 'invalid protocol',
  1: 'allocation timed out',
  2: 'unauthorized',
  3: 'client/player mismatch: not bound from this address',
  4: 'allocation not found',
  5: 'not connected',
  6: 'self-connect not allowed',
};

/** UTP's `disconnectTimeoutMS`: how long its connection layer waits without hearing anything. */
export const DEFAULT_RELAY_TIMEOUT_MS = 30_000;

/**
 * Events: `bound`, `connected` (hostId), `peer` (id: a new sender, as a host learns of clients),
 * `message` (data, fromId), `disconnect` (fromId), `relayError` (code, allocationId),
 * `rejected`, `ping`, `rebind` (reason), `bindFailed` (Error: binding gave up, the client is back
 * to `idle` with its socket and timers released), `relayLost` (RelayClientError `ERR_RELAY_LOST`:
 * nothing came from the relay for `relayTimeoutMs` once bound; the client is closed),
 * `transportClosed`, `error` (Error: socket errors).
 */
export class UnityRelayClient extends EventEmitter {
  readonly data: RelayServerData;
  nonce: number;
  state: ClientState = 'idle';
  /** The host's allocation id, once ACCEPTED (clients only). */
  hostId: Buffer | undefined;
  /** Peers seen so far, by hex id. */
  readonly peers = new Map<string, Buffer>();
  private link: ClientLink | undefined;
  /** The relay's address, resolved once (as UTP does); datagrams from anywhere else are ignored. */
  private relayAddress = '';
  private readonly retryMs: number;
  private readonly maxAttempts: number;
  private readonly pingIntervalMs: number;
  private readonly relayTimeoutMs: number;
  private readonly localAddress: string | undefined;
  private readonly tls: { ca?: string | Buffer; rejectUnauthorized?: boolean } | undefined;
  private readonly dtlsTimeoutMs: number;
  private lastSent = 0;
  /** When the re-BIND after silence last counted from (reset by that re-BIND, as in UTP). */
  private lastReceived = 0;
  /** When something last came from the relay: what `relayTimeoutMs` is measured against. */
  private lastHeard = 0;
  private keepAlive: NodeJS.Timeout | undefined;
  /** Runs from the first BIND_RECEIVED until the client is closed: the dead-relay check. */
  private liveness: NodeJS.Timeout | undefined;
  /** A transport being opened by the bind loop (after the relay closed a WebSocket/DTLS one). */
  private reopening = false;
  /** Why the client closed by itself (the relay was lost), for calls made afterwards. */
  private lostWith: RelayClientError | undefined;
  private bindWaiter:
    | { resolve: () => void; reject: (e: Error) => void; timer: NodeJS.Timeout | undefined; attempts: number }
    | undefined;
  /** The binding in progress (from `bind()` or after ERROR 3), shared by every caller. */
  private binding: Promise<void> | undefined;
  /** The connect in progress, shared by every caller. */
  private connecting: Promise<Buffer> | undefined;
  private connectWaiter:
    | { resolve: (id: Buffer) => void; reject: (e: Error) => void; timer: NodeJS.Timeout | undefined }
    | undefined;

  constructor(data: RelayServerData, options: UnityRelayClientOptions = {}) {
    super();
    this.data = data;
    this.nonce = options.nonce ?? 0;
    this.retryMs = options.retryMs ?? 1000;
    this.maxAttempts = options.maxAttempts ?? 60;
    this.pingIntervalMs = options.pingIntervalMs ?? 3000;
    this.relayTimeoutMs = options.relayTimeoutMs ?? DEFAULT_RELAY_TIMEOUT_MS;
    if (this.relayTimeoutMs !== 0 && this.relayTimeoutMs <= 3 * this.pingIntervalMs) {
      throw new ConfigError(
        `relayTimeoutMs (${this.relayTimeoutMs}) must be more than 3 × pingIntervalMs (${3 * this.pingIntervalMs}): a live relay may stay silent until the re-BIND after 3 ping periods; lower pingIntervalMs or raise relayTimeoutMs (0 never gives up)`,
        'relayTimeoutMs',
      );
    }
    this.localAddress = options.localAddress;
    this.tls = options.tls;
    this.dtlsTimeoutMs = options.dtlsTimeoutMs ?? 10_000;
  }

  /** The transport in use. */
  get connectionType(): ConnectionType {
    return this.data.connectionType ?? 'udp';
  }

  /** Allocates a host through the API, gets its join code and binds. */
  static async host(
    api: RelayApiClient,
    maxConnections: number,
    options?: UnityRelayClientOptions,
  ): Promise<{ client: UnityRelayClient; joinCode: string; allocation: AllocationJson }> {
    const allocation = await api.allocate(maxConnections);
    const joinCode = await api.joinCode(allocation.allocationId);
    const client = new UnityRelayClient(relayServerData(allocation, options?.connectionType), options);
    await client.bind();
    return { client, joinCode, allocation };
  }

  /** Joins with a join code, binds and connects to the host. */
  static async join(
    api: RelayApiClient,
    joinCode: string,
    options?: UnityRelayClientOptions,
  ): Promise<UnityRelayClient> {
    const allocation = await api.join(joinCode);
    const client = new UnityRelayClient(relayServerData(allocation, options?.connectionType), options);
    await client.bind();
    await client.connect();
    return client;
  }

  get allocationId(): Buffer {
    return this.data.allocationId;
  }

  /** Local port of the transport (after `bind`). */
  get localPort(): number {
    return this.link?.localPort ?? 0;
  }

  /**
   * Binds: BIND now and every `retryMs` (nonce + 1 after each), until BIND_RECEIVED. A call while a
   * binding is in progress (including the re-bind after ERROR 3) shares it. After `maxAttempts`
   * unanswered BINDs it rejects, and the client goes back to `idle` with its socket and keep-alive
   * released (`bindFailed` is emitted); `bind()` may then be called again.
   */
  async bind(): Promise<void> {
    if (this.state === 'closed') throw this.closedError();
    if (this.state === 'bound') return;
    return this.binding ?? this.startBinding();
  }

  /** Starts the BIND retry loop, for `bind()` and for the re-bind after ERROR 3. */
  private startBinding(): Promise<void> {
    const run = async (): Promise<void> => {
      // The first transport: a failure to open it (refused, unresolvable) is the caller's. Once
      // bound, a transport the relay closed is reopened by the retry loop below, as UTP does.
      if (this.state !== 'binding') await this.open();
      if (this.state === 'closed') throw new RelayClientError('ERR_RELAY_CLOSED', 'client closed');
      this.state = 'binding';
      await new Promise<void>((resolve, reject) => {
        this.bindWaiter = { resolve, reject, timer: undefined, attempts: 0 };
        this.bindAttempt();
      });
    };
    const p = run();
    this.binding = p;
    const done = () => {
      if (this.binding === p) this.binding = undefined;
    };
    // Callers see the rejection; nobody waiting (the re-bind after ERROR 3) is not an error.
    p.then(done, done);
    return p;
  }

  private readonly bindAttempt = (): void => {
    const w = this.bindWaiter;
    if (w === undefined) return;
    if (++w.attempts > this.maxAttempts) {
      this.failBinding(
        new RelayClientError(
          'ERR_RELAY_BIND_TIMEOUT',
          `the relay at ${this.endpoint()} did not answer ${this.maxAttempts} BIND messages (one every ${this.retryMs} ms)`,
        ),
      );
      return;
    }
    if (this.link !== undefined) this.sendBind(true);
    else this.reopen();
    w.timer = setTimeout(this.bindAttempt, this.retryMs);
  };

  /**
   * Opens a new transport for the bind loop (the relay closed the WebSocket/DTLS one). A failure
   * only costs the attempt; the next attempt tries again, until the loop or `relayTimeoutMs` ends.
   */
  private reopen(): void {
    if (this.reopening || this.state !== 'binding') return;
    this.reopening = true;
    this.open().then(
      () => {
        this.reopening = false;
        if (this.state === 'binding' && this.link !== undefined) this.sendBind(true);
      },
      () => {
        this.reopening = false;
      },
    );
  }

  /** Binding failed (no answer, or a fatal ERROR): release the socket and timers, back to `idle`. */
  private failBinding(err: Error): void {
    this.state = 'idle';
    this.stopTimers(err);
    this.stopLiveness();
    const l = this.link;
    this.link = undefined;
    void l?.close();
    this.emit('bindFailed', err);
  }

  /**
   * Connects to the host (clients): CONNECT_REQUEST every `retryMs` until ACCEPTED. A call while
   * one is in progress shares it.
   */
  connect(): Promise<Buffer> {
    if (this.connecting !== undefined) return this.connecting;
    if (this.state !== 'bound')
      return Promise.reject(new RelayClientError('ERR_RELAY_NOT_BOUND', 'not bound: bind first'));
    const p = new Promise<Buffer>((resolve, reject) => {
      let attempts = 0;
      const request = encodeMessage({
        type: 'CONNECT_REQUEST',
        allocationId: this.data.allocationId,
        toConnectionDataLength: CONNECTION_DATA_LENGTH,
        toConnectionData: this.data.hostConnectionData,
      });
      const attempt = () => {
        if (++attempts > this.maxAttempts) {
          this.connectWaiter = undefined;
          reject(
            new RelayClientError(
              'ERR_RELAY_CONNECT_TIMEOUT',
              `no ACCEPTED from the relay at ${this.endpoint()} after ${this.maxAttempts} CONNECT_REQUEST messages: is the host still there?`,
            ),
          );
          return;
        }
        if (this.link !== undefined) this.sendRaw(request);
        if (this.connectWaiter !== undefined) this.connectWaiter.timer = setTimeout(attempt, this.retryMs);
      };
      this.connectWaiter = { resolve, reject, timer: undefined };
      attempt();
    });
    this.connecting = p;
    const done = () => {
      if (this.connecting === p) this.connecting = undefined;
    };
    p.then(done, done);
    return p;
  }

  /**
   * Sends application bytes to a peer in a RELAY (to the host when `to` is omitted). Returns
   * false when the message could not leave because the client is re-binding on a new transport
   * (it is lost, as a datagram would be). Throws `ERR_RELAY_LOST`/`ERR_RELAY_CLOSED` once the
   * client is closed, `ERR_RELAY_NOT_BOUND` before the first `bind()`.
   */
  send(data: Uint8Array, to: Buffer | undefined = this.hostId): boolean {
    if (this.state === 'closed') throw this.closedError();
    if (to === undefined)
      throw new RelayClientError('ERR_RELAY_NO_PEER', 'no peer: connect first, or name the recipient');
    if (data.length > 0xffff - RELAY_HEADER_LENGTH)
      throw new EncodeError(ErrorCode.TOO_LARGE, 'RELAY content too large');
    if (this.link === undefined && this.state === 'binding') return false;
    this.sendRaw(
      encodeMessage({
        type: 'RELAY',
        fromAllocationId: this.data.allocationId,
        toAllocationId: to,
        data: Buffer.from(data.buffer, data.byteOffset, data.byteLength),
      }),
    );
    return true;
  }

  /** Sends a PING now. */
  ping(): void {
    this.sendRaw(
      encodeMessage({ type: 'PING', fromAllocationId: this.data.allocationId, sequenceNumber: 1 }),
    );
  }

  /** Tells a peer (through the relay) that this side disconnects. */
  disconnect(peer: Buffer | undefined = this.hostId): void {
    if (peer === undefined) return;
    // Closed (or between transports): nothing can be told; the peer is forgotten all the same.
    if (this.state !== 'closed' && !(this.state === 'binding' && this.link === undefined)) {
      this.sendRaw(
        encodeMessage({ type: 'DISCONNECT', fromAllocationId: this.data.allocationId, toAllocationId: peer }),
      );
    }
    this.peers.delete(peer.toString('hex'));
    if (this.hostId !== undefined && peer.equals(this.hostId)) this.hostId = undefined;
  }

  /** Sends CLOSE (unless told not to) and closes the socket. */
  async close(options: { sendClose?: boolean } = {}): Promise<void> {
    if (this.state === 'closed') return;
    const link = this.link;
    if (options.sendClose !== false && this.state === 'bound' && link !== undefined) {
      // Let the CLOSE leave before the transport goes (a UDP send completes asynchronously).
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 1000);
        link.send(encodeMessage({ type: 'CLOSE', allocationId: this.data.allocationId }), () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    this.state = 'closed';
    this.stopTimers(new RelayClientError('ERR_RELAY_CLOSED', 'client closed'));
    this.stopLiveness();
    const l = this.link;
    this.link = undefined;
    if (l !== undefined) await l.close();
  }

  /** `host:port (transport)` of the relay, for messages. */
  private endpoint(): string {
    const h = this.data.host.includes(':') ? `[${this.data.host}]` : this.data.host;
    return `${h}:${this.data.port} (${this.connectionType})`;
  }

  /** The error for a call on a closed client: why it closed, if the relay was lost. */
  private closedError(): RelayClientError {
    return this.lostWith ?? new RelayClientError('ERR_RELAY_CLOSED', 'client is closed');
  }

  private stopLiveness(): void {
    if (this.liveness !== undefined) clearInterval(this.liveness);
    this.liveness = undefined;
  }

  /** Starts the dead-relay check at the first BIND_RECEIVED (binding has its own limit before). */
  private startLiveness(): void {
    if (this.liveness !== undefined || this.relayTimeoutMs === 0) return;
    this.liveness = setInterval(
      () => {
        if (this.state !== 'bound' && this.state !== 'binding') return;
        const silent = Date.now() - this.lastHeard;
        if (silent >= this.relayTimeoutMs) this.loseRelay(silent);
      },
      Math.max(10, Math.min(1000, this.relayTimeoutMs / 4)),
    );
    this.liveness.unref();
  }

  /**
   * Nothing came from the relay for `relayTimeoutMs`: it is gone (stopped, unreachable, or it
   * forgot the allocation and stays silent, as the real relay does). The client closes without
   * a CLOSE (nobody would read it) and says so once, with `relayLost`.
   */
  private loseRelay(silentMs: number): void {
    const err = new RelayClientError(
      'ERR_RELAY_LOST',
      `the relay at ${this.endpoint()} has sent nothing for ${(silentMs / 1000).toFixed(1)} s (limit ${this.relayTimeoutMs / 1000} s): its PINGs and re-BINDs went unanswered; it is stopped or unreachable`,
    );
    this.lostWith = err;
    this.state = 'closed';
    this.stopTimers(err);
    this.stopLiveness();
    const l = this.link;
    this.link = undefined;
    void l?.close().catch(() => {});
    this.emit('relayLost', err);
  }

  private async open(): Promise<void> {
    if (this.link !== undefined) return;
    const family = net.isIPv6(this.data.host) ? 6 : 4;
    this.relayAddress = net.isIP(this.data.host)
      ? this.data.host
      : (await lookup(this.data.host, { family })).address;
    const onMessage = (msg: Buffer) => this.onMessage(msg);
    const type = this.connectionType;
    let link: ClientLink;
    if (type === 'ws' || type === 'wss') link = await this.openWebSocket(type, onMessage);
    else if (type === 'dtls') link = await this.openDtls(onMessage);
    else link = await this.openUdp(family, onMessage);
    if (this.state === 'closed') {
      // close() ran while the transport was opening: release it, start no timers.
      await link.close();
      throw this.closedError();
    }
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    this.link = link;
    this.lastReceived = Date.now();
    this.keepAlive = setInterval(() => this.tick(), Math.max(10, Math.min(this.pingIntervalMs, 1000) / 2));
    this.keepAlive.unref();
  }

  private async openUdp(family: 4 | 6, onMessage: (msg: Buffer) => void): Promise<ClientLink> {
    const socket = dgram.createSocket(family === 6 ? 'udp6' : 'udp4');
    socket.on('message', (msg, rinfo) => {
      // Like UTP 1.x: only the relay's own endpoint may talk to us.
      if (rinfo.port === this.data.port && rinfo.address === this.relayAddress) onMessage(msg);
    });
    socket.on('error', (err) => this.emit('error', err));
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(0, this.localAddress, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    const port = this.data.port;
    const address = this.relayAddress;
    return {
      localPort: socket.address().port,
      send: (bytes, sent) => socket.send(bytes, port, address, () => sent?.()),
      // dgram sends queued before close() still go out.
      close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
    };
  }

  private async openWebSocket(type: 'ws' | 'wss', onMessage: (msg: Buffer) => void): Promise<ClientLink> {
    // UTP: "ws://" + IP:port, "wss://" + host string:port (the certificate names the host).
    const host = type === 'wss' ? this.data.host : this.relayAddress;
    const url = `${type}://${net.isIPv6(host) ? `[${host}]` : host}:${this.data.port}/`;
    const ws = new WebSocket(url, {
      perMessageDeflate: false,
      maxPayload: 64 * 1024,
      ...(this.localAddress !== undefined ? { localAddress: this.localAddress } : {}),
      ...(this.tls?.ca !== undefined ? { ca: this.tls.ca } : {}),
      ...(this.tls?.rejectUnauthorized !== undefined
        ? { rejectUnauthorized: this.tls.rejectUnauthorized }
        : {}),
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => {
        ws.off('error', reject);
        resolve();
      });
      ws.once('error', reject);
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) onMessage(data);
    });
    ws.on('error', (err: Error) => this.emit('error', err));
    ws.on('close', () => this.onTransportClosed(link));
    const socket = (ws as unknown as { _socket?: net.Socket })._socket;
    const link: ClientLink = {
      localPort: socket?.localPort ?? 0,
      send: (bytes, sent) => {
        if (ws.readyState === WebSocket.OPEN) ws.send(bytes, { binary: true }, () => sent?.());
        else sent?.();
      },
      close: () =>
        new Promise<void>((resolve) => {
          if (ws.readyState === WebSocket.CLOSED) return resolve();
          const timer = setTimeout(() => {
            ws.terminate();
            resolve();
          }, 2000);
          ws.once('close', () => {
            clearTimeout(timer);
            resolve();
          });
          ws.close(1000);
        }),
    };
    return link;
  }

  private async openDtls(onMessage: (msg: Buffer) => void): Promise<ClientLink> {
    // UTP: PSK identity = the 16 allocation id bytes, PSK = the 64-byte allocation key.
    const client = await DtlsClient.connect({
      host: this.relayAddress,
      port: this.data.port,
      identity: this.data.allocationId,
      psk: this.data.key,
      timeoutMs: this.dtlsTimeoutMs,
      ...(this.localAddress !== undefined ? { localAddress: this.localAddress } : {}),
    });
    client.on('message', onMessage);
    const link: ClientLink = {
      localPort: client.localAddress().port,
      send: (bytes, sent) => {
        try {
          client.send(bytes);
        } catch {
          // Closed or too large for a record: lost, as a datagram would be.
        }
        // A connected UDP socket hands the datagram to the kernel before close() can run.
        if (sent !== undefined) setImmediate(sent);
      },
      close: async () => client.close(),
    };
    client.on('close', () => this.onTransportClosed(link));
    return link;
  }

  /**
   * The relay closed a connection-like transport (WebSocket, DTLS). UTP opens a new one and
   * re-BINDs with the next nonce (the new connection is a new "address").
   */
  private onTransportClosed(link: ClientLink): void {
    if (this.link !== link || this.state === 'closed') return;
    this.link = undefined;
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    this.keepAlive = undefined;
    this.emit('transportClosed');
    if (this.state === 'bound' && this.binding === undefined) {
      this.state = 'binding';
      this.emit('rebind', 'transport closed');
      // Nobody waits on this binding: its end is `bound`, `bindFailed` or `relayLost`.
      this.startBinding().catch(() => {});
    }
    // While binding, the retry loop reopens a transport at its next attempt.
  }

  private tick(): void {
    if (this.state !== 'bound') return;
    const now = Date.now();
    if (now - this.lastReceived >= 3 * this.pingIntervalMs) {
      // UTP 2.x: the relay stays silent for timed-out allocations, so bind again (same nonce).
      this.lastReceived = now;
      this.emit('rebind', 'silence');
      this.sendBind(false);
    } else if (now - this.lastSent >= this.pingIntervalMs) {
      this.ping();
    }
  }

  private sendBind(increment: boolean): void {
    this.sendRaw(createBind(this.nonce, this.data.connectionData, this.data.key));
    if (increment) this.nonce = (this.nonce + 1) & 0xffff;
  }

  private sendRaw(bytes: Buffer): void {
    if (this.link === undefined)
      throw new RelayClientError('ERR_RELAY_NOT_BOUND', 'not bound: call bind() first');
    this.lastSent = Date.now();
    this.link.send(bytes);
  }

  private stopTimers(reason: Error): void {
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    this.keepAlive = undefined;
    if (this.bindWaiter !== undefined) {
      clearTimeout(this.bindWaiter.timer);
      this.bindWaiter.reject(reason);
      this.bindWaiter = undefined;
    }
    if (this.connectWaiter !== undefined) {
      clearTimeout(this.connectWaiter.timer);
      this.connectWaiter.reject(reason);
      this.connectWaiter = undefined;
    }
  }

  private onMessage(msg: Buffer): void {
    let m: RelayMessage;
    try {
      m = decodeMessage(msg);
    } catch (e) {
      if (e instanceof DecodeError) return; // UTP drops anything that is not a valid relay message
      throw e;
    }
    this.lastReceived = Date.now();
    this.lastHeard = this.lastReceived;
    switch (m.type) {
      case 'BIND_RECEIVED':
        if (this.state === 'binding') {
          this.state = 'bound';
          this.startLiveness();
          const w = this.bindWaiter;
          this.bindWaiter = undefined;
          if (w !== undefined) {
            clearTimeout(w.timer);
            w.resolve();
          }
          this.emit('bound');
        }
        return;
      case 'PING':
        this.emit('ping');
        return;
      case 'ACCEPTED': {
        const w = this.connectWaiter;
        if (w === undefined) return; // duplicate: UTP ignores it
        this.connectWaiter = undefined;
        clearTimeout(w.timer);
        this.hostId = Buffer.from(m.fromAllocationId);
        this.peers.set(this.hostId.toString('hex'), this.hostId);
        this.emit('connected', this.hostId);
        w.resolve(this.hostId);
        return;
      }
      case 'REJECTED': {
        const w = this.connectWaiter;
        this.connectWaiter = undefined;
        this.emit('rejected');
        if (w !== undefined) {
          clearTimeout(w.timer);
          w.reject(
            new RelayClientError(
              'ERR_RELAY_REJECTED',
              'the host has reached its maximum number of connections (REJECTED)',
            ),
          );
        }
        return;
      }
      case 'RELAY': {
        if (!this.data.allocationId.equals(m.toAllocationId)) return; // UTP checks To == own id
        const hex = toHex(m.fromAllocationId);
        let from = this.peers.get(hex);
        if (from === undefined) {
          from = Buffer.from(m.fromAllocationId);
          this.peers.set(hex, from);
          this.emit('peer', from);
        }
        this.emit('message', m.data, from);
        return;
      }
      case 'DISCONNECT':
        if (!this.data.allocationId.equals(m.toAllocationId)) return;
        this.peers.delete(toHex(m.fromAllocationId));
        if (this.hostId?.equals(m.fromAllocationId)) this.hostId = undefined;
        this.emit('disconnect', Buffer.from(m.fromAllocationId));
        return;
      case 'ERROR':
        this.onError(m.errorCode, Buffer.from(m.allocationId));
        return;
      default:
        return;
    }
  }

  private onError(code: number, allocationId: Buffer): void {
    this.emit('relayError', code, allocationId);
    if (code === RelayErrorCode.CLIENT_PLAYER_MISMATCH && this.state === 'bound') {
      // UTP 2.x: our address changed; bind again with a fresh nonce. The same retry loop as
      // bind() (BIND every retryMs, nonce + 1 after each), so a lost BIND is sent again.
      // While a binding is already in progress its loop takes care of it.
      if (this.binding !== undefined) return;
      this.emit('rebind', 'error 3');
      this.state = 'binding';
      void this.startBinding();
      return;
    }
    const fatal = code === RelayErrorCode.ALLOCATION_NOT_FOUND || code === RelayErrorCode.TIMEOUT;
    const failWith = new RelayClientError(
      'ERR_RELAY_REFUSED',
      `the relay at ${this.endpoint()} answered ERROR ${code}${ERROR_MEANING[code] === undefined ? '' : ` (${ERROR_MEANING[code]})`}`,
    );
    if (this.connectWaiter !== undefined && (fatal || code === RelayErrorCode.SELF_CONNECT_NOT_ALLOWED)) {
      const w = this.connectWaiter;
      this.connectWaiter = undefined;
      clearTimeout(w.timer);
      w.reject(failWith);
    }
    if (fatal && this.bindWaiter !== undefined) this.failBinding(failWith);
  }
}
