/**
 * `gamewire conform <protocol> --target HOST:PORT`: runs a protocol's conformance checks against
 * a server and prints one line per check (pass, fail with its evidence and what a real client
 * does about it, skip with why), or one JSON object with `--json`. Exit 0 only when every check
 * that ran passed; a failed run ends with the `ERR_CONFORM_FAILED` error line and exit 1.
 *
 * Protocol-free: the checks come from each registry entry's module (`ProtocolModule.conform`),
 * and only the named protocol's module is loaded.
 */
import type { Command } from 'commander';
import {
  type AnyConformSuite,
  type CheckResult,
  type ConformOptionValues,
  checksMarkdown,
  type Evidence,
  formatSource,
  parseTarget,
  runChecks,
  selectChecks,
} from '../core/conform.js';
import { CommandError, parseIntOption, UsageError } from '../core/errors.js';
import { type ProtocolEntry, registry } from '../protocols/registry.js';

export { parseTarget };

/** Bytes of evidence shown per field in the text report (the JSON report carries up to 64 KiB). */
const TEXT_EVIDENCE_BYTES = 96;
const JSON_EVIDENCE_BYTES = 64 * 1024;

/**
 * The generated part of docs/conform.md: for each protocol with checks, its check list as
 * Markdown with the default options (`npm run docs:conform` writes it; a test compares).
 */
export async function conformSections(): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for (const entry of registry) {
    if (!entry.hasConform) continue;
    const suite = await loadSuite(entry);
    const ctx = await suite.prepare(undefined, defaultValues(suite));
    out.push([entry.name, checksMarkdown(suite, ctx)]);
    await suite.close?.(ctx);
  }
  return out;
}

function defaultValues(suite: AnyConformSuite): ConformOptionValues {
  return Object.fromEntries(suite.options.map((o) => [o.key, o.defaultValue]));
}

async function loadSuite(entry: ProtocolEntry): Promise<AnyConformSuite> {
  const module = await entry.load();
  if (module.conform === undefined) throw new UsageError(`${entry.name} has no conformance checks`);
  return module.conform();
}

interface CommonFlags {
  target?: string;
  json?: boolean;
  list?: boolean;
  markdown?: boolean;
  check?: string;
  timeoutMs?: string;
}

/**
 * Adds `conform` and one subcommand per protocol with checks. Only the protocol named on the
 * command line (all of them without `argv`, for help and tests) is loaded to declare its options.
 */
export async function addConformCommand(program: Command, argv?: readonly string[]): Promise<void> {
  const cmd = program
    .command('conform')
    .description(
      'check a server against what the real clients do (one line per check; --list shows them and their sources)',
    );
  const named = argv === undefined ? undefined : argv[argv.indexOf('conform') + 1];
  for (const entry of registry) {
    if (!entry.hasConform) continue;
    const sub = cmd
      .command(entry.name)
      .description(`run the ${entry.name} conformance checks against a server`);
    if (named !== undefined && named !== entry.name) continue;
    const suite = await loadSuite(entry);
    sub
      .option('--target <host:port>', 'the server to check')
      .option('--json', 'print one JSON object (for CI) instead of the report')
      .option('--list', 'list the checks, their rules and sources, without running them')
      .option('--markdown', 'with --list: print the list as Markdown (the reference in docs/conform.md)')
      .option(
        '--check <ids>',
        'run only these checks (comma-separated ids or id prefixes) and what they need',
      )
      .option('--timeout-ms <ms>', "deadline of each check, instead of the check's own");
    for (const o of suite.options) {
      const description =
        o.choices === undefined ? o.description : `${o.description} (${o.choices.join('|')})`;
      if (o.defaultValue !== undefined) sub.option(o.flag, description, o.defaultValue);
      else sub.option(o.flag, description);
    }
    sub.action(async (opts: CommonFlags & Record<string, unknown>) => {
      process.exitCode = await conform(suite, opts);
    });
  }
}

function optionValues(suite: AnyConformSuite, opts: Record<string, unknown>): ConformOptionValues {
  const values: Record<string, string | boolean | undefined> = {};
  for (const o of suite.options) {
    const v = opts[o.key];
    if (v !== undefined && typeof v !== 'string' && typeof v !== 'boolean')
      throw new UsageError(`${o.flag.split(' ')[0]} takes one value`);
    if (typeof v === 'string' && o.choices !== undefined && !o.choices.includes(v))
      throw new UsageError(`${o.flag.split(' ')[0]} takes ${o.choices.join(', ')}, not "${v}"`);
    values[o.key] = v;
  }
  return values;
}

async function conform(suite: AnyConformSuite, opts: CommonFlags & Record<string, unknown>): Promise<number> {
  const values = optionValues(suite, opts);
  const only = opts.check
    ?.split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const timeoutMs = opts.timeoutMs === undefined ? undefined : parseIntOption(opts.timeoutMs);
  if (timeoutMs !== undefined && timeoutMs < 100) throw new UsageError('--timeout-ms must be at least 100');
  if (opts.list === true) {
    const ctx = await suite.prepare(undefined, values);
    try {
      if (opts.markdown === true) process.stdout.write(checksMarkdown(suite, ctx));
      else listChecks(suite, ctx, only, opts.json === true);
    } finally {
      await suite.close?.(ctx);
    }
    return 0;
  }
  if (opts.target === undefined)
    throw new UsageError(`gamewire conform ${suite.protocol} needs --target HOST:PORT (or --list)`);
  const target = parseTarget(opts.target);
  selectChecks(suite.checks, only); // an unknown id is a usage error before anything connects
  const ctx = await suite.prepare(target, values);
  const started = performance.now();
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const json = opts.json === true;
  const targetText = `${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}`;
  const setup = suite.describe(ctx);
  let results: CheckResult[];
  // The report is held back until a check shows the server can be reached (a pass, or a failure
  // that is the server's answer): a target nothing listens on, or a wss certificate this machine
  // does not trust, is one line saying so, not a failure and a list of skips.
  let held: string[] | undefined = json ? undefined : [];
  const write = (text: string): void => {
    if (held === undefined) process.stdout.write(text);
    else held.push(text);
  };
  const release = (): void => {
    if (held === undefined) return;
    process.stdout.write(held.join(''));
    held = undefined;
  };
  try {
    if (!json) write(`gamewire conform ${suite.protocol} --target ${targetText} (${setup})\n`);
    results = await runChecks(suite, ctx, {
      ...(only !== undefined ? { only } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      signal: stop.signal,
      onResult: json
        ? undefined
        : (r) => {
            if (r.status === 'pass' || (r.status === 'fail' && reachFailure(r, targetText) === undefined))
              release();
            write(formatResult(r));
          },
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await suite.close?.(ctx);
  }
  const ms = Math.round(performance.now() - started);
  const count = (s: CheckResult['status']) => results.filter((r) => r.status === s).length;
  const passed = count('pass');
  const failed = count('fail');
  const skipped = count('skip');
  // Nothing passed and every failure was not getting there: say that, once.
  const firstFailure = results.find((r) => r.status === 'fail');
  const unreachable =
    passed === 0 &&
    firstFailure !== undefined &&
    results.every((r) => r.status !== 'fail' || reachFailure(r, targetText) !== undefined)
      ? reachFailure(firstFailure, targetText)
      : undefined;
  if (unreachable !== undefined && !json) {
    throw new CommandError(unreachable.code, unreachable.message);
  }
  release();
  if (json) {
    const report = {
      protocol: suite.protocol,
      target: targetText,
      setup,
      ok: failed === 0,
      passed,
      failed,
      skipped,
      ms,
      checks: results.map(resultJson),
    };
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } else {
    process.stdout.write(
      `${passed} passed, ${failed} failed, ${skipped} skipped (${(ms / 1000).toFixed(1)} s)\n`,
    );
  }
  if (unreachable !== undefined) throw new CommandError(unreachable.code, unreachable.message);
  if (stop.signal.aborted) throw new CommandError('ERR_CONFORM_STOPPED', 'stopped before every check ran');
  if (failed > 0) {
    const ids = results.filter((r) => r.status === 'fail').map((r) => r.id);
    throw new CommandError(
      'ERR_CONFORM_FAILED',
      `${failed} of ${passed + failed} checks failed: ${ids.join(', ')}`,
    );
  }
  return 0;
}

/** System errors that mean the checks never reached a server at the target. */
const UNREACHABLE: Record<string, string> = {
  ECONNREFUSED: 'connection refused: nothing listens there',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve (yet)',
  EHOSTUNREACH: 'no route to the host',
  ENETUNREACH: 'no route to the network',
  EADDRNOTAVAIL: 'the address is not usable here',
};

/** Certificate errors: a wss server whose certificate this machine does not trust. */
const UNTRUSTED_CERT = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_GET_ISSUER_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * When a failed check never got a server's answer (nothing listens, a name that does not
 * resolve, a certificate this machine does not trust): the error to report instead of the
 * check's verdict, with what to do. Undefined for a failure that is the server's doing.
 */
export function reachFailure(r: CheckResult, target: string): { code: string; message: string } | undefined {
  const code = r.errorCode;
  if (code === undefined) return undefined;
  const why = UNREACHABLE[code];
  if (why !== undefined)
    return {
      code: 'ERR_CONFORM_UNREACHABLE',
      message: `cannot reach ${target} (${code}: ${why}): is the server running there? check --target (no check ran against a server)`,
    };
  if (UNTRUSTED_CERT.has(code))
    return {
      code: 'ERR_CONFORM_TLS',
      message:
        `the TLS certificate of ${target} is not trusted (${code}): pass --ca FILE with the server's certificate ` +
        '(gamewire serve unity-relay writes its self-signed one to unity-relay-wss-cert.pem in its data folder, ./data by default) or --insecure to accept any',
    };
  return undefined;
}

function listChecks(
  suite: AnyConformSuite,
  ctx: unknown,
  only: readonly string[] | undefined,
  json: boolean,
): void {
  const picked = selectChecks(suite.checks, only);
  const checks = suite.checks.filter((c) => picked.has(c.id));
  if (json) {
    const list = checks.map((c) => ({
      id: c.id,
      title: c.title,
      rule: c.rule,
      clientReaction: c.clientReaction,
      sources: c.sources,
      requires: c.requires ?? [],
      notApplicable: c.applies?.(ctx) ?? null,
    }));
    process.stdout.write(
      `${JSON.stringify({ protocol: suite.protocol, setup: suite.describe(ctx), checks: list })}\n`,
    );
    return;
  }
  process.stdout.write(`${suite.protocol} conformance checks (${suite.describe(ctx)})\n`);
  for (const c of checks) {
    const na = c.applies?.(ctx);
    process.stdout.write(`\n${c.id}: ${c.title}${na === undefined ? '' : `  [skipped here: ${na}]`}\n`);
    process.stdout.write(`  rule:     ${c.rule}\n`);
    process.stdout.write(`  if not:   ${c.clientReaction}\n`);
    for (const s of c.sources) process.stdout.write(`  source:   ${formatSource(s)}\n`);
    if (c.requires !== undefined && c.requires.length > 0)
      process.stdout.write(`  needs:    ${c.requires.join(', ')}\n`);
  }
}

const LABEL = { pass: 'PASS', fail: 'FAIL', skip: 'SKIP' } as const;

/** One report line (plus the evidence lines of a failure). */
export function formatResult(r: CheckResult): string {
  const head = `${LABEL[r.status]}  ${r.id.padEnd(28)} ${r.title}`;
  const time = r.status === 'skip' ? '' : ` (${r.ms} ms)`;
  let out = `${head}${time}\n`;
  if (r.status === 'pass') {
    if (r.message !== undefined) out += `      ${r.message}\n`;
    return out;
  }
  if (r.status === 'skip') return `${out}      ${r.message ?? ''}\n`;
  out += `      ${r.message ?? 'failed'}\n`;
  const e = r.evidence ?? {};
  if (e.sent !== undefined) out += `      sent:      ${hexPreview(e.sent)}\n`;
  if (e.expected !== undefined)
    out += `      expected:  ${typeof e.expected === 'string' ? e.expected : hexPreview(e.expected)}\n`;
  if (e.received !== undefined)
    out += `      received:  ${e.received.length === 0 ? '(nothing)' : hexPreview(e.received)}\n`;
  if (e.note !== undefined) out += `      note:      ${e.note}\n`;
  if (r.clientReaction !== undefined) out += `      a real client: ${r.clientReaction}\n`;
  return out;
}

function hexPreview(bytes: Uint8Array): string {
  const shown = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, TEXT_EVIDENCE_BYTES));
  const hex = shown.toString('hex');
  return bytes.length > TEXT_EVIDENCE_BYTES ? `${hex}… (${bytes.length} bytes)` : hex;
}

function hexOf(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, JSON_EVIDENCE_BYTES)).toString(
    'hex',
  );
}

function evidenceJson(e: Evidence): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (e.sent !== undefined) out.sent = hexOf(e.sent);
  if (e.expected !== undefined)
    out.expected = typeof e.expected === 'string' ? e.expected : hexOf(e.expected);
  if (e.received !== undefined) out.received = hexOf(e.received);
  if (e.note !== undefined) out.note = e.note;
  return out;
}

function resultJson(r: CheckResult): Record<string, unknown> {
  const out: Record<string, unknown> = { id: r.id, title: r.title, status: r.status, ms: r.ms };
  if (r.message !== undefined) out.message = r.message;
  if (r.notApplicable === true) out.notApplicable = true;
  if (r.evidence !== undefined) out.evidence = evidenceJson(r.evidence);
  if (r.clientReaction !== undefined) out.clientReaction = r.clientReaction;
  out.sources = r.sources.map(formatSource);
  return out;
}
