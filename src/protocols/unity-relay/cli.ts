/**
 * `gamewire unity-relay host|join`: a two-terminal chat through a running relay, using
 * `UnityRelayClient`. The host relays every line it receives to its other clients.
 *
 * How a chat ends: stdin closes or a signal arrives (exit 0, CLOSE sent); the host leaves, for
 * a joiner (exit 0, "the host left"); the relay is lost (`relayLost`, or re-binding gave up) or
 * says the allocation is gone (ERROR 1/4): one error line, exit 1.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { CliError, CommandError, connectFailure, parseIntOption, UsageError } from '../../core/errors.js';
import { isGamewireError } from '../../wire/errors.js';
import {
  type ConnectionType,
  DEFAULT_API_TIMEOUT_MS,
  DEFAULT_RELAY_TIMEOUT_MS,
  RelayApiClient,
  UnityRelayClient,
  type UnityRelayClientOptions,
} from './client.js';

interface ChatOptions {
  api: string;
  apiKey?: string;
  maxConnections?: number;
  transport: string;
  ca?: string;
  insecure?: boolean;
  pingIntervalMs: number;
  relayTimeoutMs: number;
  apiTimeoutMs: number;
}

const TRANSPORTS: readonly ConnectionType[] = ['udp', 'dtls', 'ws', 'wss'];

/** Client options from the chat flags: the transport, and for wss which certificates to trust. */
function clientOptions(opts: ChatOptions): UnityRelayClientOptions {
  if (!(TRANSPORTS as readonly string[]).includes(opts.transport))
    throw new UsageError(`--transport must be one of ${TRANSPORTS.join(', ')}`);
  if (opts.pingIntervalMs < 10) throw new UsageError('--ping-interval-ms takes at least 10');
  if (opts.relayTimeoutMs !== 0 && opts.relayTimeoutMs <= 3 * opts.pingIntervalMs)
    throw new UsageError(
      `--relay-timeout-ms (${opts.relayTimeoutMs}) must be more than 3 × --ping-interval-ms (${3 * opts.pingIntervalMs}), or 0 to never give up`,
    );
  const o: UnityRelayClientOptions = {
    connectionType: opts.transport as ConnectionType,
    pingIntervalMs: opts.pingIntervalMs,
    relayTimeoutMs: opts.relayTimeoutMs,
    // Binding and connecting to the host give up after the same time (one attempt per second).
    ...(opts.relayTimeoutMs > 0
      ? { maxAttempts: Math.max(1, Math.ceil(opts.relayTimeoutMs / RETRY_MS)) }
      : {}),
    retryMs: RETRY_MS,
  };
  if (opts.ca !== undefined) {
    try {
      o.tls = { ca: readFileSync(opts.ca) };
    } catch (err) {
      throw new UsageError(`--ca: ${(err as Error).message}`);
    }
  }
  if (opts.insecure === true) o.tls = { ...o.tls, rejectUnauthorized: false };
  return o;
}

const DEFAULT_API = 'http://127.0.0.1:37080';
/** BIND and CONNECT_REQUEST retry period: UTP's connectTimeoutMS. */
const RETRY_MS = 1000;

function status(text: string): void {
  process.stderr.write(`${text}\n`);
}

function short(id: Buffer): string {
  return id.toString('hex').slice(0, 8);
}

type ChatEnd = { kind: 'stdin' | 'signal' | 'hostLeft' } | { kind: 'failed'; error: CommandError };

/**
 * Runs until stdin ends, a signal, the host leaving (`hostLeft`, joiners), or the relay being
 * lost; sends CLOSE when the relay is still there. A lost relay rejects with the error line.
 */
async function chat(
  client: UnityRelayClient,
  onLine: (line: string) => void,
  watch?: (end: (e: ChatEnd) => void) => void,
): Promise<void> {
  const rl = createInterface({ input: process.stdin, terminal: false });
  let end: (e: ChatEnd) => void = () => {};
  const ended = new Promise<ChatEnd>((resolve) => {
    end = resolve;
  });
  const onInt = () => end({ kind: 'signal' });
  rl.on('line', (line) => {
    if (line.trim() === '') return;
    try {
      onLine(line);
    } catch (err) {
      // A line typed as the client closes: say why the chat ended, never a stack trace.
      end({ kind: 'failed', error: asCommandError(err) });
    }
  });
  rl.on('close', () => end({ kind: 'stdin' }));
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onInt);
  client.on('error', (err: Error) => status(`socket error: ${err.message}`));
  client.on('relayError', (code: number) => {
    status(`relay ERROR ${code}`);
    if (code === 1 || code === 4)
      end({
        kind: 'failed',
        error: new CommandError(
          'ERR_RELAY_ALLOCATION',
          `the relay ended this allocation (ERROR ${code}: ${code === 1 ? 'timed out' : 'not found'}): host again for a new one`,
        ),
      });
  });
  client.on('relayLost', (err: Error) => end({ kind: 'failed', error: asCommandError(err) }));
  // Re-binding gave up (only reached with --relay-timeout-ms 0: the relay timeout comes first).
  client.on('bindFailed', (err: Error) =>
    end({ kind: 'failed', error: new CommandError('ERR_RELAY_LOST', `the relay is gone: ${err.message}`) }),
  );
  watch?.(end);
  const how = await ended;
  rl.close();
  process.off('SIGINT', onInt);
  process.off('SIGTERM', onInt);
  // Quiet from here on: the closing client may still report what it is shutting down.
  client.removeAllListeners('error').on('error', () => {});
  await client.close();
  if (how.kind === 'failed') throw how.error;
}

function asCommandError(err: unknown): CommandError {
  if (err instanceof CommandError) return err;
  if (isGamewireError(err)) return new CommandError(String(err.code), err.message);
  return new CommandError('ERR_RELAY', (err as Error).message ?? String(err));
}

/** OpenSSL's codes for a server certificate the client does not trust (Node's `err.code`). */
const UNTRUSTED_CERTIFICATE = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * A wss connection refused because the relay's certificate is not trusted: says which flags fix
 * it, and where a relay that generated its own certificate keeps it.
 */
function untrustedCertificate(err: unknown, opts: ChatOptions): CliError | undefined {
  if (opts.transport !== 'wss') return undefined;
  type Failure = Error & { code?: string; cause?: unknown };
  for (let e = err instanceof Error ? (err as Failure) : undefined; e !== undefined; ) {
    if (
      (e.code !== undefined && UNTRUSTED_CERTIFICATE.has(e.code)) ||
      /self[- ]signed certificate|unable to verify the first certificate/i.test(e.message)
    ) {
      return new CliError(
        'ERR_RELAY_TLS',
        `the relay's wss certificate is not trusted (${e.message}): pass --ca with the relay's certificate (a relay started without --wss-cert generates one: unity-relay-wss-cert.pem in its data folder, data/ by default), or --insecure for local testing only`,
      );
    }
    e = e.cause instanceof Error ? (e.cause as Failure) : undefined;
  }
  return undefined;
}

/** The error's message and its cause's (fetch says only "fetch failed"). */
function describe(err: unknown): string {
  const e = err as Error & { cause?: unknown };
  return e.cause instanceof Error ? `${e.message}: ${e.cause.message}` : String(e.message ?? e);
}

/**
 * Why hosting or joining failed, naming what was tried: the API's address for a refused or
 * unresolvable API, the error's own code (`ERR_RELAY_API`, `ERR_RELAY_API_TIMEOUT`,
 * `ERR_RELAY_NO_ENDPOINT`, …) otherwise. Binding that got no answer names the relay's endpoint.
 */
function startFailure(what: 'host' | 'join', err: unknown, opts: ChatOptions): unknown {
  if (err instanceof UsageError || err instanceof CommandError) return err;
  const hint = connectFailure(err, opts.api, '--api');
  if (hint instanceof CliError) return hint;
  const tls = untrustedCertificate(err, opts);
  if (tls !== undefined) return tls;
  const message = `could not ${what}: ${isGamewireError(err) ? (err as Error).message : describe(err)}`;
  return isGamewireError(err)
    ? new CommandError(String(err.code), message)
    : new CliError('ERR_RELAY', message);
}

async function host(opts: ChatOptions): Promise<void> {
  const api = new RelayApiClient(opts.api, { apiKey: opts.apiKey, timeoutMs: opts.apiTimeoutMs });
  let started: Awaited<ReturnType<typeof UnityRelayClient.host>>;
  try {
    started = await UnityRelayClient.host(api, opts.maxConnections ?? 8, clientOptions(opts));
  } catch (err) {
    throw startFailure('host', err, opts);
  }
  const { client, joinCode } = started;
  status(
    `hosting over ${client.connectionType}; join code: ${joinCode}  (gamewire unity-relay join ${joinCode})`,
  );
  process.stdout.write(`${joinCode}\n`);
  const broadcast = (data: Buffer, except?: Buffer) => {
    for (const peer of client.peers.values())
      if (except === undefined || !peer.equals(except)) client.send(data, peer);
  };
  client.on('peer', (id: Buffer) => status(`${short(id)} joined`));
  client.on('disconnect', (id: Buffer) => status(`${short(id)} left`));
  client.on('message', (data: Buffer, from: Buffer) => {
    const line = `[${short(from)}] ${data.toString('utf8')}`;
    process.stdout.write(`${line}\n`);
    broadcast(Buffer.from(line), from);
  });
  await chat(client, (line) => broadcast(Buffer.from(`[host] ${line}`)));
}

async function join(code: string, opts: ChatOptions): Promise<void> {
  const api = new RelayApiClient(opts.api, { apiKey: opts.apiKey, timeoutMs: opts.apiTimeoutMs });
  let client: UnityRelayClient;
  try {
    client = await UnityRelayClient.join(api, code, clientOptions(opts));
  } catch (err) {
    throw startFailure('join', err, opts);
  }
  status(
    `connected to host ${short(client.hostId!)} through the relay over ${client.connectionType}; type lines to send`,
  );
  const hostId = client.hostId!;
  client.on('message', (data: Buffer) => process.stdout.write(`${data.toString('utf8')}\n`));
  await chat(
    client,
    (line) => {
      if (client.hostId !== undefined) client.send(Buffer.from(line));
    },
    (end) =>
      // The host closed, or its allocation ended: the relay sends its DISCONNECT.
      client.on('disconnect', (from: Buffer) => {
        if (!from.equals(hostId)) return;
        status('the host left');
        end({ kind: 'hostLeft' });
      }),
  );
}

const PING_OPTION = [
  '--ping-interval-ms <ms>',
  'PING the relay after this long without sending (UTP RelayConnectionTimeMS)',
  parseIntOption,
  3000,
] as const;
const RELAY_TIMEOUT_OPTION = [
  '--relay-timeout-ms <ms>',
  'give up on the relay after this long without a word from it (UTP disconnectTimeoutMS; 0: never)',
  parseIntOption,
  DEFAULT_RELAY_TIMEOUT_MS,
] as const;
const API_TIMEOUT_OPTION = [
  '--api-timeout-ms <ms>',
  'give up on an allocation API request after this long',
  parseIntOption,
  DEFAULT_API_TIMEOUT_MS,
] as const;

export function registerCommands(program: Command): void {
  const cmd = program.command('unity-relay').description('Unity Relay tools: a chat through a running relay');
  cmd
    .command('host')
    .description('allocate, print a join code, and chat with whoever joins (stdin → peers, peers → stdout)')
    .option('--api <url>', 'allocation API base URL', DEFAULT_API)
    .option('--api-key <key>', 'bearer key of the allocation API')
    .option('--max-connections <n>', 'most clients', parseIntOption, 8)
    .option('--transport <type>', 'udp, dtls, ws or wss (the allocation endpoint to use)', 'udp')
    .option('--ca <file>', "wss: trust this PEM certificate (e.g. the relay's self-signed one)")
    .option('--insecure', 'wss: trust any certificate (local testing only)')
    .option(...PING_OPTION)
    .option(...RELAY_TIMEOUT_OPTION)
    .option(...API_TIMEOUT_OPTION)
    .action(async (opts: ChatOptions) => {
      if (opts.maxConnections !== undefined && opts.maxConnections < 1)
        throw new UsageError('--max-connections must be ≥ 1');
      await host(opts);
    });
  cmd
    .command('join')
    .description('join a host by its join code and chat (stdin → host, host → stdout)')
    .argument('<joinCode>', 'the code the host printed')
    .option('--api <url>', 'allocation API base URL', DEFAULT_API)
    .option('--transport <type>', "udp, dtls, ws or wss (may differ from the host's)", 'udp')
    .option('--ca <file>', "wss: trust this PEM certificate (e.g. the relay's self-signed one)")
    .option('--insecure', 'wss: trust any certificate (local testing only)')
    .option('--api-key <key>', 'bearer key of the allocation API')
    .option(...PING_OPTION)
    .option(...RELAY_TIMEOUT_OPTION)
    .option(...API_TIMEOUT_OPTION)
    .action(async (code: string, opts: ChatOptions) => join(code, opts));
}
