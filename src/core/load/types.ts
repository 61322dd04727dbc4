/**
 * The contract between `gamewire load` (src/cli/load.ts, which knows no protocol) and a
 * protocol's load generator (src/protocols/<name>/load.ts, reached through the `load` member of
 * its ProtocolModule). The generic part schedules clients, churn and the end of the run, and
 * measures; a generator only knows how one client of its protocol lives.
 */
import { GamewireError } from '../../wire/errors.js';
import type { LoadStats } from './stats.js';

/** A flag of `gamewire load <protocol>` that only this protocol has. */
export interface LoadOption {
  /** Commander flag: `--profile <name>`, `--urgent-share <fraction>`, `--no-prove-address`. */
  flag: string;
  /** Key in the parsed options (commander's camelCase of the flag). */
  key: string;
  description: string;
  type: 'int' | 'number' | 'string' | 'bool' | 'list';
  default?: string | number | boolean | readonly string[];
  min?: number;
  max?: number;
  choices?: readonly string[];
  /** Kept out of the summary (keys, passwords). */
  secret?: boolean;
  /**
   * Former spellings still accepted, hidden from `--help` (`--tls-ca <file>` for `--ca <file>`):
   * the same value type, read into `key` when the flag itself is not given.
   */
  aliases?: readonly string[];
}

/** The options every generator shares, parsed and checked. */
export interface LoadSettings {
  /** The server (`--target`); undefined only where a generator finds it otherwise (an allocation API). */
  target: { host: string; port: number } | undefined;
  /** Clients under way at once. */
  clients: number;
  /** Sessions begun per second at most (arrivals and replacements); 0: no limit. */
  arrivalRate: number;
  /** Length of the run in seconds. */
  durationS: number;
  /** A session leaves after about this long (0.5× to 1.5×) and another arrives; 0: no churn. */
  churnS: number;
  /** Local addresses to send from, one per client slot in turn; empty: the system chooses. */
  from: readonly string[];
}

/** Why a session was asked to stop. */
export type StopReason = 'churn' | 'end';

/** One client's session, as the generator sees it. */
export interface LoadClient {
  /** Session number, from 0, over the whole run. */
  readonly index: number;
  /** The client slot (0 .. clients-1); a replacement takes its predecessor's slot. */
  readonly slot: number;
  /** The address to send from (`--from`), or undefined. */
  readonly localAddress: string | undefined;
  /** Aborted when the session must leave (`reason`: churn, or the end of the run). */
  readonly signal: AbortSignal;
  /** Why `signal` was aborted, once it was. */
  readonly stopReason: StopReason | undefined;
  /** Call once the client is in (connected, logged in, bound, entered): its join is over. */
  joined(): void;
  /**
   * Says what the client is doing on its way in ("bind over dtls to 127.0.0.1:37001"): when the
   * run ends before it got in, the summary counts it there (`waitingFor`), so a run where nobody
   * got in says where they were stuck, not only that they were.
   */
  step(what: string): void;
}

/** What a run gives a generator. */
export interface LoadRun<O = Record<string, unknown>> {
  readonly settings: LoadSettings;
  /** The generator's own options, checked against its declarations, defaults filled in. */
  readonly options: O;
  readonly stats: LoadStats;
  /**
   * Resolves when traffic may go to `host`: loopback, or any address with `--i-own-this-target`.
   * Generators call it for every address they learn on the way (a relay named by an allocation,
   * a secure server named by a login); `what` says where it came from.
   */
  allow(host: string, what: string): Promise<void>;
  /** Aborted when the whole run stops (the end, or Ctrl-C). */
  readonly signal: AbortSignal;
}

/** A prepared generator: one session per client, as many times as clients come and go. */
export interface LoadGenerator {
  /**
   * One client's life: join, play until `client.signal` aborts, leave. It may also resolve on
   * its own once the client has nothing left to do (a finished download). It throws for a
   * failed session (counted by the error's `code`); a session the end of the run stopped before
   * its work was done throws `LoadUnfinished`.
   */
  session(client: LoadClient): Promise<void>;
  /** Releases what `prepare` built (shared sockets, agents). */
  close?(): Promise<void>;
  /** Figures derived at the end (a loss ratio from two counters), added to the summary as `derived`. */
  report?(): Record<string, number>;
}

export interface LoadDefinition {
  summary: string;
  /** What one client is, for help and reports: "player", "host/join pair", "download". */
  clientNoun: string;
  /** `--target`'s port when only a host is given. */
  defaultPort: number;
  /**
   * `--target`'s port when only a host is given, where it depends on the generator's options
   * (unity-relay: each `--transport` has its own port); `defaultPortHelp` says so in `--help`.
   */
  defaultPortFor?(options: Record<string, unknown>): number;
  defaultPortHelp?: string;
  /** True when `--target` may be left out (the generator finds the server otherwise). */
  targetOptional?: boolean;
  options: readonly LoadOption[];
  /**
   * Counters whose rate the progress line shows (per second, over the last interval), and
   * latency series whose p99 it shows; the summary has everything.
   */
  progress?: { rates?: readonly string[]; latencies?: readonly string[] };
  /** Checks options, resolves addresses and builds what sessions share (a cache's indexes). */
  prepare(run: LoadRun): Promise<LoadGenerator>;
}

/** Thrown by a session that the end of the run stopped before its work was done. */
export class LoadUnfinished extends GamewireError {
  constructor(what = 'the run ended first') {
    super('ERR_LOAD_UNFINISHED', what);
  }
  override get name(): string {
    return 'LoadUnfinished';
  }
}

/** A generator's options with every declared default filled in (for callers other than the CLI). */
export function withLoadDefaults(
  def: LoadDefinition,
  given: Record<string, unknown> = {},
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const o of def.options) out[o.key] = given[o.key] ?? o.default;
  for (const [k, v] of Object.entries(given)) if (!(k in out)) out[k] = v;
  return out;
}
