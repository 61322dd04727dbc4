/**
 * `gamewire load <protocol> --target HOST:PORT`: drives a server with a crowd of the protocol's
 * own clients (docs/cli.md, docs/capacity.md). This file knows no protocol: each subcommand comes
 * from the `load` member of a protocol module (its options, its sessions); the options every
 * protocol shares, the target rule, the progress line and the summary are here.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { CommandError, UsageError } from '../core/errors.js';
import {
  checkLocalAddresses,
  type LoadDefinition,
  type LoadOption,
  type LoadProgress,
  type LoadSettings,
  type LoadSummary,
  OWN_TARGET_FLAG,
  parseFromAddresses,
  parseHostPort,
  runLoad,
  TargetPolicy,
} from '../core/load/index.js';
import { registry } from '../protocols/registry.js';

/** Longest run (a day): the generator always stops by itself. */
const MAX_DURATION_S = 86_400;
const MAX_CLIENTS = 100_000;

function numberParser(what: string, min: number, max: number, integer: boolean) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n)))
      throw new InvalidArgumentError(`${what}: "${value}" is not ${integer ? 'a whole number' : 'a number'}`);
    if (n < min || n > max) throw new InvalidArgumentError(`${what}: ${n} is not within ${min}..${max}`);
    return n;
  };
}

function flagName(flag: string): string {
  return flag.split(/[ ,]/)[0]!;
}

/** Commander's attribute name of a flag: `--tls-ca <file>` → `tlsCa` (`--no-x` → `x`). */
function aliasKey(flag: string): string {
  return flagName(flag)
    .replace(/^--(no-)?/, '')
    .replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

function protocolOption(opt: LoadOption): Option {
  const o = new Option(opt.flag, opt.description);
  const name = flagName(opt.flag);
  if (opt.type === 'int' || opt.type === 'number')
    o.argParser(
      numberParser(
        name,
        opt.min ?? (opt.type === 'int' ? 0 : Number.NEGATIVE_INFINITY),
        opt.max ?? Number.MAX_SAFE_INTEGER,
        opt.type === 'int',
      ),
    );
  if (opt.type === 'list')
    o.argParser((value: string, previous: string[] | undefined) => [
      ...(previous ?? []),
      ...value
        .split(',')
        .map((v) => v.trim())
        .filter((v) => v !== ''),
    ]);
  if (opt.choices !== undefined) o.choices(opt.choices as string[]);
  if (opt.default !== undefined && opt.type !== 'bool') o.default(opt.default);
  return o;
}

function addCommonOptions(cmd: Command, def: LoadDefinition): void {
  cmd
    .option(
      '--target <host:port>',
      `the server to load (${def.defaultPortHelp ?? `port ${def.defaultPort} when only a host is given`})${def.targetOptional === true ? '; optional' : ''}`,
    )
    .option(
      '--clients <n>',
      `${def.clientNoun}s under way at once`,
      numberParser('--clients', 1, MAX_CLIENTS, true),
      10,
    )
    .option(
      '--arrival-rate <per-second>',
      'new clients per second at most, arrivals and replacements (0: all at once)',
      numberParser('--arrival-rate', 0, 1_000_000, false),
      100,
    )
    .option(
      '--duration <s>',
      'length of the run in seconds (it also ends when every client is done)',
      numberParser('--duration', 0.1, MAX_DURATION_S, false),
      10,
    )
    .option(
      '--churn <s>',
      'each client leaves after about this long (0.5x to 1.5x) and another takes its place (0: no churn)',
      numberParser('--churn', 0, MAX_DURATION_S, false),
      0,
    )
    .option(
      '--from <addresses...>',
      'local addresses to send from, one per client in turn (lists and ranges: 127.0.0.2-9)',
    )
    .option('--json', 'print the summary as one JSON object on stdout')
    .option('--progress', 'print the progress line on stderr even when it is not a terminal')
    .option(OWN_TARGET_FLAG, 'allow a target outside this machine (you own it: see docs/capacity.md)');
}

const SI = ['', 'k', 'M', 'G'];
function short(n: number): string {
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1000 && i < SI.length - 1) {
    v /= 1000;
    i++;
  }
  return `${v >= 100 || i === 0 ? Math.round(v) : v.toFixed(1)}${SI[i]}`;
}

function bytes(n: number): string {
  if (n < 1024) return `${Math.round(n)} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

function progressLine(p: LoadProgress, clients: number): string {
  const s = p.sessions;
  const parts = [
    `${Math.round(p.elapsedS)}s`,
    `clients ${s.active}/${clients}`,
    `joined ${s.joined}`,
    `failed ${s.failed}`,
  ];
  for (const [name, rate] of Object.entries(p.rates)) parts.push(`${name} ${short(rate)}/s`);
  for (const [name, ms] of Object.entries(p.p99)) parts.push(`${name} p99 ${ms.toFixed(ms < 10 ? 2 : 0)} ms`);
  parts.push(`in ${bytes(p.bytesInPerS)}/s`);
  if (p.violations > 0) parts.push(`VIOLATIONS ${p.violations}`);
  return parts.join('  ');
}

function humanSummary(protocol: string, s: LoadSummary, interruptedBy?: string): string {
  const lines: string[] = [];
  lines.push(
    `${protocol} load on ${s.target ?? '(from the allocation API)'}: ${s.clients} ${s.clientNoun}s, ${s.elapsedS.toFixed(1)} s` +
      (s.from.length > 0 ? `, from ${s.from.length} address${s.from.length === 1 ? '' : 'es'}` : '') +
      (s.interrupted
        ? `, interrupted (${interruptedBy ?? 'stopped'}) before the ${s.durationS} s it was to run`
        : ''),
  );
  const n = s.sessions;
  lines.push(
    `sessions: ${n.started} started, ${n.joined} joined, ${n.succeeded} succeeded, ${n.failed} failed, ${n.unfinished} unfinished` +
      (n.stuck > 0 ? `, ${n.stuck} stuck` : ''),
  );
  const lat = Object.entries(s.latencyMs);
  if (lat.length > 0) {
    lines.push('latency ms      count      p50      p90      p99    p99.9      max');
    for (const [name, l] of lat) {
      const f = (v: number) => v.toFixed(v < 10 ? 2 : 1).padStart(9);
      lines.push(
        `  ${name.padEnd(10)}${String(l.count).padStart(9)}${f(l.p50)}${f(l.p90)}${f(l.p99)}${f(l.p999)}${f(l.max)}`,
      );
    }
  }
  const counters = Object.entries(s.counters);
  if (counters.length > 0)
    lines.push(
      `counters: ${counters.map(([k, v]) => `${k} ${v} (${short(s.perSecond[k] ?? 0)}/s)`).join(', ')}`,
    );
  lines.push(
    `bytes: in ${bytes(s.bytes.in)} (${bytes(s.bytes.inPerS)}/s), out ${bytes(s.bytes.out)} (${bytes(s.bytes.outPerS)}/s)`,
  );
  for (const [code, count] of Object.entries(s.errors))
    lines.push(`error ${code} x${count}: ${s.errorMessages[code] ?? ''}`);
  for (const [step, count] of Object.entries(s.waitingFor))
    lines.push(`not in when the run ended: ${count} at "${step}"`);
  if (Object.keys(s.violations).length === 0) lines.push('violations: none');
  else for (const v of s.violationSamples) lines.push(`VIOLATION ${v}`);
  return `${lines.join('\n')}\n`;
}

/**
 * Why nobody got in: the first error, or else where the sessions were when the run ended (a
 * DTLS handshake to a port that never answers fails no session before the run is over).
 */
function noClientMessage(def: LoadDefinition, s: LoadSummary): string {
  // gamewire's own errors say what happened and what to do; a socket's (ECONNREFUSED) only that.
  const errors = Object.entries(s.errorMessages);
  const first = errors.find(([code]) => code.startsWith('ERR_')) ?? errors[0];
  if (first !== undefined) return `no ${def.clientNoun} got in: ${first[0]}: ${first[1]}`;
  const waiting = Object.entries(s.waitingFor).sort((a, b) => b[1] - a[1])[0];
  const transport = typeof s.options.transport === 'string' ? ` for --transport ${s.options.transport}` : '';
  const where = s.target === null ? '' : ` (is ${s.target} the right --target${transport}?)`;
  if (waiting !== undefined)
    return (
      `no ${def.clientNoun} got in within ${s.elapsedS.toFixed(1)} s and none failed: ` +
      `${waiting[1]} of ${s.sessions.started} were still at "${waiting[0]}" when the run ended, with no answer${where}`
    );
  return `no ${def.clientNoun} got in within ${s.elapsedS.toFixed(1)} s and none failed: the run ended first${where}; try a longer --duration`;
}

async function runLoadCommand(
  protocol: string,
  def: LoadDefinition,
  opts: Record<string, unknown>,
): Promise<void> {
  const owned = opts.iOwnThisTarget === true;
  const policy = new TargetPolicy({ owned });
  let target: LoadSettings['target'];
  if (typeof opts.target === 'string') {
    target = parseHostPort(opts.target, def.defaultPortFor?.(opts) ?? def.defaultPort);
    await policy.allow(target.host, '--target');
  } else if (def.targetOptional !== true) {
    throw new UsageError(`gamewire load ${protocol} needs --target HOST:PORT`);
  }
  const from = parseFromAddresses((opts.from as string[] | undefined) ?? []);
  await checkLocalAddresses(from);
  const settings: LoadSettings = {
    target,
    clients: opts.clients as number,
    arrivalRate: opts.arrivalRate as number,
    durationS: opts.duration as number,
    churnS: opts.churn as number,
    from,
  };
  const options: Record<string, unknown> = {};
  for (const o of def.options) {
    options[o.key] = opts[o.key];
    // A former spelling (hidden alias) fills the option when the current flag is not given.
    for (const alias of o.aliases ?? []) {
      const value = opts[aliasKey(alias)];
      if (value !== undefined && (options[o.key] === undefined || options[o.key] === o.default))
        options[o.key] = value;
    }
  }

  const live = opts.progress === true || process.stderr.isTTY === true;
  const tty = process.stderr.isTTY === true;
  let drew = false;
  const abort = new AbortController();
  // The first Ctrl-C ends the run as its end would (clients leave, the summary is printed); a
  // second one does not wait for that.
  let interruptedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interruptedBy !== undefined) process.exit(signal === 'SIGTERM' ? 143 : 130);
    interruptedBy = signal;
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let summary: LoadSummary;
  try {
    summary = await runLoad({
      definition: def,
      settings,
      options,
      policy,
      signal: abort.signal,
      ...(live
        ? {
            onProgress: (p: LoadProgress) => {
              const line = progressLine(p, settings.clients);
              if (tty) {
                process.stderr.write(`\r${line}\x1b[K`);
                drew = true;
              } else process.stderr.write(`${line}\n`);
            },
          }
        : {}),
    });
  } finally {
    if (drew) process.stderr.write('\n');
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  const out = { protocol, ...summary, interruptedBy: interruptedBy ?? null };
  if (opts.json === true) process.stdout.write(`${JSON.stringify(out)}\n`);
  else process.stdout.write(humanSummary(protocol, summary, interruptedBy));
  // Whatever a session left behind (a socket in its closing handshake), the command ends.
  setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  if (interruptedBy !== undefined) {
    // 128 + the signal's number, as a shell reports a command a signal stopped.
    throw new CommandError(
      'ERR_LOAD_INTERRUPTED',
      `interrupted (${interruptedBy}) after ${summary.elapsedS.toFixed(1)} s of ${summary.durationS} s: ` +
        'the summary covers the run until then',
      interruptedBy === 'SIGTERM' ? 143 : 130,
    );
  }
  if (summary.sessions.joined === 0)
    throw new CommandError('ERR_LOAD_NO_CLIENT', noClientMessage(def, summary));
  if (!summary.ok) {
    const violations = Object.values(summary.violations).reduce((a, b) => a + b, 0);
    throw new CommandError(
      'ERR_LOAD_FAILED',
      `${summary.sessions.failed} of ${summary.sessions.started} sessions failed` +
        (violations > 0 ? `, ${violations} integrity violations (${summary.violationSamples[0] ?? ''})` : ''),
    );
  }
}

/**
 * Adds `gamewire load <protocol>` for every protocol whose registry entry has a generator. Only
 * the protocol named in `argv` is loaded (its module and generator); the others are listed by
 * name, so `gamewire load js5 …` starts without loading the four other protocols.
 */
export async function addLoadCommand(program: Command, argv?: readonly string[]): Promise<void> {
  const load = program
    .command('load')
    .description('drive a server with a crowd of clients and measure it (loopback only by default)');
  // The protocol right after `load`; anything else there (an option first, `--help`): load them all.
  const word = argv === undefined ? undefined : argv[argv.indexOf('load') + 1];
  const named = registry.some((e) => e.hasLoad && e.name === word) ? word : undefined;
  for (const entry of registry) {
    if (!entry.hasLoad) continue;
    const cmd = load.command(entry.name);
    if (named !== undefined && named !== entry.name) {
      cmd.description(`load a ${entry.name} server`);
      continue;
    }
    const module = await entry.load();
    if (module.load === undefined) throw new UsageError(`${entry.name} has no load generator`);
    const def = await module.load();
    cmd.description(def.summary);
    addCommonOptions(cmd, def);
    for (const opt of def.options) {
      cmd.addOption(protocolOption(opt));
      for (const alias of opt.aliases ?? [])
        cmd.addOption(
          protocolOption({ ...opt, flag: alias, aliases: [] })
            .default(undefined)
            .hideHelp(),
        );
    }
    cmd.action((opts: Record<string, unknown>) => runLoadCommand(entry.name, def, opts));
  }
}
