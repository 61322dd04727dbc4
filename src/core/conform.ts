/**
 * Conformance checks: what `gamewire conform <protocol>` runs against somebody's server. This
 * module knows no protocol: it declares what a check is (a rule, the real client it comes from,
 * what that client does when a server breaks it), how a check reports a failure (the bytes sent,
 * expected and received), and runs a suite with deadlines, dependencies and cleanup. Each
 * protocol's checks live in `src/protocols/<name>/conform/` and are reached through its
 * `ProtocolModule.conform` loader; the command and the report are in src/cli/conform.ts.
 */
import { GamewireError } from '../wire/errors.js';
import { UsageError } from './errors.js';

/** Where a check's rule comes from: a public repository and the file (and function) that shows it. */
export interface CheckSource {
  /** `owner/name` on GitHub, or a site for documents that are not in a repository. */
  repo: string;
  /** Path inside the repository, or the page. */
  path: string;
  /** The class, function or section that shows the behaviour. */
  symbol?: string;
  /** Where to read it, when it is not a file on GitHub (a documentation page). */
  url?: string;
}

/** What a failing check shows: the exchange that went wrong. */
export interface Evidence {
  /** Bytes the check sent (the request that got the wrong answer). */
  sent?: Uint8Array;
  /** What a real client expects: bytes, or a description when the rule is not one byte string. */
  expected?: Uint8Array | string;
  /** Bytes the server sent back (empty when it sent nothing). */
  received?: Uint8Array;
  /** Anything else worth saying (an offset, a field, a count). */
  note?: string;
}

/** A check found the server breaking its rule. */
export class CheckFailure extends GamewireError<'ERR_CONFORM_FAILED'> {
  readonly evidence: Evidence;
  /** `cause`: the error behind a failure that never got the server's answer (a refused connection). */
  constructor(message: string, evidence: Evidence = {}, options?: { cause?: unknown }) {
    super('ERR_CONFORM_FAILED', message, options);
    this.evidence = evidence;
  }
  override get name(): string {
    return 'CheckFailure';
  }
}

/** A check that cannot run against this server or with these options (the reason says why). */
export class CheckSkip extends GamewireError<'ERR_CONFORM_SKIPPED'> {
  constructor(reason: string) {
    super('ERR_CONFORM_SKIPPED', reason);
  }
  override get name(): string {
    return 'CheckSkip';
  }
}

/** What a running check may use: its deadline, cleanup, and the failure and skip helpers. */
export interface CheckRun {
  /** Aborted when the check's time is up (or the run is stopped): stop waiting, send nothing more. */
  readonly signal: AbortSignal;
  /** Milliseconds left before the check's deadline. */
  remainingMs(): number;
  /** Runs `fn` when the check ends, pass or fail (close sockets, stop timers); last added runs first. */
  defer(fn: () => unknown): void;
  /** Throws a CheckFailure: the server broke the rule. */
  fail(message: string, evidence?: Evidence): never;
  /** Throws a CheckSkip: the check cannot say anything about this server. */
  skip(reason: string): never;
}

export interface ConformCheck<C> {
  /** Stable id, unique in the suite (`handshake.ok`, `relay.length`); what `--check` selects. */
  id: string;
  /** One line: what is checked. */
  title: string;
  /** The rule a server must follow, in a sentence or two. */
  rule: string;
  /** The real clients (and documents) the rule is read from. */
  sources: readonly CheckSource[];
  /** What a real client does when a server breaks the rule (printed with a failure). */
  clientReaction: string;
  /** Checks that must pass first; when one did not, this one is skipped and says why. */
  requires?: readonly string[];
  /** Why the check does not apply with these options (a profile, a transport), or undefined. */
  applies?(ctx: C): string | undefined;
  /** Deadline for the whole check, default 10 s. */
  timeoutMs?: number;
  /** Runs alone: nothing else runs at the same time (checks that measure ordering between clients). */
  exclusive?: boolean;
  /** Resolves when the server follows the rule (optionally with a short detail for the report). */
  run(ctx: C, check: CheckRun): Promise<string | undefined>;
}

/** A protocol-specific option of `gamewire conform <protocol>`. */
export interface ConformOption {
  /** Commander flag, e.g. `--profile <name>`; a flag without `<value>` is a boolean. */
  flag: string;
  /** Commander's camelCase key of the flag (`profile`). */
  key: string;
  description: string;
  /** Allowed values, checked by the runner. */
  choices?: readonly string[];
  /** Shown in `--help` and applied by the runner when the flag is absent. */
  defaultValue?: string;
}

/** Where to point the checks. */
export interface ConformTarget {
  host: string;
  port: number;
}

/** Option values as the command line gave them (defaults filled in). */
export type ConformOptionValues = Readonly<Record<string, string | boolean | undefined>>;

export interface ConformSuite<C> {
  protocol: string;
  /** Options of this protocol's checks (`--profile`, `--transport`, `--api` …). */
  options: readonly ConformOption[];
  /** How many checks may run at once (default 1). Independent checks of slow servers gain from more. */
  concurrency?: number;
  /** Deadline of a check that names none (default 10 s). */
  defaultTimeoutMs?: number;
  /** One line describing the setup for the report header (`profile 530, build 530`). */
  describe(ctx: C): string;
  /**
   * Builds the checks' shared context. Throws UsageError for options that do not fit together.
   * `target` is undefined for `--list`, which prepares the context only to say what applies.
   */
  prepare(target: ConformTarget | undefined, options: ConformOptionValues): Promise<C>;
  /** Releases what `prepare` opened. */
  close?(ctx: C): Promise<void>;
  checks: readonly ConformCheck<C>[];
}

/** A loaded suite whose context type is erased (what the registry hands out). */
export type AnyConformSuite = ConformSuite<any>;

export type CheckStatus = 'pass' | 'fail' | 'skip';

export interface CheckResult {
  id: string;
  title: string;
  status: CheckStatus;
  /** Wall time of the check in ms (0 for a skip decided before it ran). */
  ms: number;
  /** Pass: an optional detail; fail: what broke; skip: why. */
  message?: string;
  evidence?: Evidence;
  /** With a failure: what a real client does about it. */
  clientReaction?: string;
  sources: readonly CheckSource[];
  /** A skip because the check does not apply here (its `applies`): it blocks no other check. */
  notApplicable?: boolean;
  /**
   * A failure that was an error rather than a verdict: its code, or its cause's (ECONNREFUSED,
   * ENOTFOUND, DEPTH_ZERO_SELF_SIGNED_CERT …), so the report can tell "the server is wrong" from
   * "the server cannot be reached".
   */
  errorCode?: string;
}

export interface RunOptions {
  /** Only these ids (and what they require); prefixes select groups (`relay` selects `relay.*`). */
  only?: readonly string[];
  /** Deadline of each check, overriding its own (ms). */
  timeoutMs?: number;
  /** Called with each result in list order, as soon as it and every check before it are done. */
  onResult?(result: CheckResult): void;
  /** Stops the run (Ctrl-C): running checks fail as stopped, the rest are skipped. */
  signal?: AbortSignal;
}

const DEFAULT_TIMEOUT_MS = 10_000;

/** Ids selected by `only` plus, transitively, the ids they require; throws on an unknown id. */
export function selectChecks<C>(
  checks: readonly ConformCheck<C>[],
  only: readonly string[] | undefined,
): Set<string> {
  const all = new Map(checks.map((c) => [c.id, c]));
  if (only === undefined || only.length === 0) return new Set(all.keys());
  const picked = new Set<string>();
  const add = (id: string): void => {
    if (picked.has(id)) return;
    picked.add(id);
    for (const r of all.get(id)?.requires ?? []) add(r);
  };
  for (const want of only) {
    const matches = checks.filter((c) => c.id === want || c.id.startsWith(`${want}.`));
    if (matches.length === 0)
      throw new UsageError(`no check "${want}" (checks: ${[...all.keys()].join(', ')})`);
    for (const m of matches) add(m.id);
  }
  return picked;
}

/**
 * Runs the suite's checks: each in order of the list, at most `concurrency` at a time, a check
 * after the checks it requires, an exclusive check alone. Every check gets a deadline and its
 * cleanups run whatever happens. Returns one result per selected check, in list order.
 */
export async function runChecks<C>(
  suite: ConformSuite<C>,
  ctx: C,
  options: RunOptions = {},
): Promise<CheckResult[]> {
  const selected = selectChecks(suite.checks, options.only);
  const checks = suite.checks.filter((c) => selected.has(c.id));
  const results = new Map<string, CheckResult>();
  const concurrency = Math.max(1, suite.concurrency ?? 1);
  let printed = 0;
  const flush = (): void => {
    while (printed < checks.length) {
      const r = results.get(checks[printed]!.id);
      if (r === undefined) return;
      options.onResult?.(r);
      printed++;
    }
  };

  const pending = [...checks];
  const running = new Map<string, Promise<void>>();
  let exclusiveRunning = false;

  const blockedBy = (c: ConformCheck<C>): string | undefined => {
    for (const r of c.requires ?? []) {
      const done = results.get(r);
      if (done !== undefined && done.status !== 'pass' && done.notApplicable !== true)
        return `needs ${r}, which ${statusVerb(done.status)}`;
    }
    return undefined;
  };
  const ready = (c: ConformCheck<C>): boolean =>
    (c.requires ?? []).every((r) => results.has(r) || !selected.has(r));

  while (pending.length > 0 || running.size > 0) {
    let started = false;
    for (let i = 0; i < pending.length; i++) {
      const c = pending[i]!;
      if (!ready(c)) continue;
      const blocked = options.signal?.aborted ? 'the run was stopped' : blockedBy(c);
      const notApplicable = blocked === undefined ? c.applies?.(ctx) : undefined;
      if (blocked !== undefined || notApplicable !== undefined) {
        pending.splice(i--, 1);
        const r = skipResult(c, (blocked ?? notApplicable)!);
        if (notApplicable !== undefined) r.notApplicable = true;
        results.set(c.id, r);
        started = true;
        continue;
      }
      if (exclusiveRunning || running.size >= concurrency || (c.exclusive === true && running.size > 0))
        break;
      pending.splice(i--, 1);
      if (c.exclusive === true) exclusiveRunning = true;
      const p = runOne(c, ctx, options, suite.defaultTimeoutMs).then((r) => {
        results.set(c.id, r);
        running.delete(c.id);
        if (c.exclusive === true) exclusiveRunning = false;
      });
      running.set(c.id, p);
      started = true;
      if (exclusiveRunning) break;
    }
    flush();
    if (running.size > 0) await Promise.race(running.values());
    else if (!started && pending.length > 0) {
      // Requirements that were not selected and never ran: nothing can unblock these.
      for (const c of pending.splice(0)) results.set(c.id, skipResult(c, 'its requirements did not run'));
    }
  }
  flush();
  return checks.map((c) => results.get(c.id)!);
}

function statusVerb(s: CheckStatus): string {
  return s === 'fail' ? 'failed' : 'was skipped';
}

function skipResult<C>(c: ConformCheck<C>, reason: string): CheckResult {
  return { id: c.id, title: c.title, status: 'skip', ms: 0, message: reason, sources: c.sources };
}

async function runOne<C>(
  c: ConformCheck<C>,
  ctx: C,
  options: RunOptions,
  suiteDefault?: number,
): Promise<CheckResult> {
  const timeoutMs = options.timeoutMs ?? c.timeoutMs ?? suiteDefault ?? DEFAULT_TIMEOUT_MS;
  const controller = new AbortController();
  const cleanups: (() => unknown)[] = [];
  const started = performance.now();
  const deadline = started + timeoutMs;
  const run: CheckRun = {
    signal: controller.signal,
    remainingMs: () => Math.max(0, deadline - performance.now()),
    defer: (fn) => {
      cleanups.push(fn);
    },
    fail: (message, evidence) => {
      throw new CheckFailure(message, evidence);
    },
    skip: (reason) => {
      throw new CheckSkip(reason);
    },
  };
  let timer: NodeJS.Timeout | undefined;
  const stopped = options.signal;
  const onStop = (): void => controller.abort(new CheckFailure('the run was stopped'));
  stopped?.addEventListener('abort', onStop, { once: true });
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new CheckFailure(`did not complete within ${timeoutMs} ms`);
      controller.abort(err);
      reject(err);
    }, timeoutMs);
    controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true });
  });
  expired.catch(() => {});
  let result: CheckResult;
  try {
    const detail = await Promise.race([c.run(ctx, run), expired]);
    result = { id: c.id, title: c.title, status: 'pass', ms: elapsed(started), sources: c.sources };
    if (detail !== undefined) result.message = detail;
  } catch (err) {
    result = failureResult(c, err, elapsed(started));
  } finally {
    clearTimeout(timer);
    stopped?.removeEventListener('abort', onStop);
    if (!controller.signal.aborted) controller.abort(new CheckFailure('check finished'));
    for (const fn of cleanups.reverse()) {
      try {
        await fn();
      } catch {
        // Cleanup of a peer that is already gone.
      }
    }
  }
  return result;
}

function failureResult<C>(c: ConformCheck<C>, err: unknown, ms: number): CheckResult {
  const base = { id: c.id, title: c.title, ms, sources: c.sources };
  if (err instanceof CheckSkip) return { ...base, status: 'skip', message: err.message };
  if (err instanceof CheckFailure) {
    const failure: CheckResult = {
      ...base,
      status: 'fail',
      message: err.message,
      evidence: err.evidence,
      clientReaction: c.clientReaction,
    };
    const code = err.cause === undefined ? undefined : errorCodeOf(err.cause);
    if (code !== undefined) failure.errorCode = code;
    return failure;
  }
  // Anything else (a socket error, a decoder's DecodeError on the server's bytes) is the server's
  // doing as far as the check can tell: report it as a failure with its message.
  const message = err instanceof Error ? err.message : String(err);
  const result: CheckResult = {
    ...base,
    status: 'fail',
    message,
    evidence: {},
    clientReaction: c.clientReaction,
  };
  const code = errorCodeOf(err);
  if (code !== undefined) result.errorCode = code;
  return result;
}

/** The most specific code on an error or its causes: a system error's (ECONNREFUSED) over a wrapper's. */
export function errorCodeOf(err: unknown): string | undefined {
  let found: string | undefined;
  for (let e = err, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code !== '') {
      found = code;
      if (!code.startsWith('ERR_')) return code;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return found;
}

function elapsed(started: number): number {
  return Math.round(performance.now() - started);
}

/** Parses `HOST:PORT` or `[v6]:PORT` (a usage error names `flag`). */
export function parseTarget(value: string, flag = '--target'): ConformTarget {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(value) ?? /^([^:\s]+):(\d+)$/.exec(value);
  if (m === null) throw new UsageError(`${flag} takes HOST:PORT (or [IPv6]:PORT), not "${value}"`);
  const port = Number(m[2]);
  if (port < 1 || port > 65535) throw new UsageError(`${flag} port must be 1-65535, not ${m[2]}`);
  return { host: m[1]!, port };
}

/** Formats a citation as `owner/repo path (symbol)`. */
export function formatSource(s: CheckSource): string {
  return `${s.repo} ${s.path}${s.symbol === undefined ? '' : ` (${s.symbol})`}`;
}

/** A link to the cited file (GitHub, at the default branch) or page. */
export function sourceUrl(s: CheckSource): string {
  return s.url ?? `https://github.com/${s.repo}/blob/HEAD/${s.path}`;
}

/**
 * The checks of a suite as Markdown (the reference in docs/conform.md is this, for each
 * protocol): id and title, rule, what a real client does otherwise, sources, requirements.
 */
export function checksMarkdown<C>(suite: ConformSuite<C>, ctx: C): string {
  let out = '';
  for (const c of suite.checks) {
    out += `#### \`${c.id}\`: ${c.title}\n\n`;
    out += `- **Rule.** ${c.rule}\n`;
    out += `- **Otherwise.** ${c.clientReaction}\n`;
    const links = c.sources.map(
      (s) =>
        `[${s.repo} \`${s.path}\`](${sourceUrl(s)})${s.symbol === undefined ? '' : ` (\`${s.symbol}\`)`}`,
    );
    out += `- **Sources.** ${links.join('; ')}\n`;
    if (c.requires !== undefined && c.requires.length > 0)
      out += `- **Needs.** ${c.requires.map((r) => `\`${r}\``).join(', ')} (skipped when one did not pass)\n`;
    const na = c.applies?.(ctx);
    if (na !== undefined) out += `- **Skipped by default:** ${na}\n`;
    out += '\n';
  }
  return out;
}
