/**
 * One RMC connection as handlers see it, whatever the transport (framed TCP, PRUDP): who is
 * logged in, per-connection state, disconnect hooks, and the sink the dispatcher writes
 * answers to. The sink stands on the transport's connection of the seam
 * (src/core/connection.ts): address, address key and counters come from there, so nothing
 * here asks which transport it is.
 */

import type { Connection, TransportKind } from '../../core/connection.js';
import type { Logger } from '../../core/logger.js';
import type { WireWriter } from '../../wire/index.js';

/** Who is authenticated on a connection. */
export interface RmcUser {
  /** The user's PID (16-byte UUID in HyperScape's LoginWithToken response). */
  pid: Buffer;
  /** Display name or account name. */
  name: string;
  /** Anything the token validator extracted. */
  claims?: Record<string, unknown>;
}

/** Per-connection context, shared by every call on that connection. */
export interface RmcConnection {
  readonly id: number;
  /** How the peer came (to show; handlers never need to branch on it). */
  readonly transport: TransportKind;
  /** The transport's connection of the seam: address key, byte and message counters. */
  readonly peer: Connection;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** When the transport opened it (ms since the epoch). */
  readonly openedAt: number;
  /** Set by LoginProtocol (or your own protocol) once the client is authenticated. */
  user: RmcUser | undefined;
  /** The client's station URLs as registered with LoginProtocol::Register_V1. */
  stationUrls: string[];
  /** Free per-connection state for handlers, keyed by the handler author. */
  readonly data: Map<string, unknown>;
  readonly closed: boolean;
  /** Runs `hook` once when the connection ends (also when it already ended). */
  onDisconnect(hook: () => void | Promise<void>): void;
  /** How many disconnect hooks are waiting (diagnostics: handlers should add one per connection). */
  readonly disconnectHookCount: number;
  /** Closes the connection (after flushing what was already answered). */
  close(): void;
}

/** Where a transport receives outgoing frames. */
export interface RmcSink {
  /** The writer to append frames to (the dispatcher appends whole frames). */
  readonly writer: WireWriter;
  /** Called after each appended frame; the transport flushes when it likes. */
  commit(): void;
  /** Ends the connection. */
  close(): void;
  /** The transport's connection of the seam (framed TCP's, a PRUDP peer) this sink writes to. */
  readonly connection: Connection;
}

let nextConnectionId = 1;

/** The dispatcher's connection state (handlers see it as `RmcConnection`). */
export class DispatcherConnection implements RmcConnection {
  readonly id = nextConnectionId++;
  /** When the transport opened it (ms since the epoch), for the dashboard. */
  readonly openedAt = Date.now();
  readonly transport: TransportKind;
  readonly peer: Connection;
  readonly remoteAddress: string;
  readonly remotePort: number;
  user: RmcUser | undefined = undefined;
  stationUrls: string[] = [];
  readonly data = new Map<string, unknown>();
  closed = false;
  readonly sink: RmcSink;
  private hooks: (() => void | Promise<void>)[] = [];
  private readonly log: Logger;

  constructor(sink: RmcSink, log: Logger) {
    const peer = sink.connection;
    this.peer = peer;
    this.transport = peer.transport;
    this.remoteAddress = peer.remoteAddress;
    this.remotePort = peer.remotePort;
    this.sink = sink;
    this.log = log;
  }

  onDisconnect(hook: () => void | Promise<void>): void {
    if (this.closed) this.runHook(hook);
    else this.hooks.push(hook);
  }

  get disconnectHookCount(): number {
    return this.hooks.length;
  }

  close(): void {
    this.sink.close();
  }

  /** Called by the dispatcher when the transport reports the end. */
  end(): void {
    if (this.closed) return;
    this.closed = true;
    const hooks = this.hooks;
    this.hooks = [];
    for (const h of hooks) this.runHook(h);
  }

  private runHook(hook: () => void | Promise<void>): void {
    try {
      const r = hook();
      if (r instanceof Promise) r.catch((err) => this.log.error({ err }, 'disconnect hook failed'));
    } catch (err) {
      this.log.error({ err }, 'disconnect hook failed');
    }
  }
}
