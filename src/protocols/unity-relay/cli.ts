/**
 * `gamewire unity-relay host|join`: a two-terminal chat through a running relay, using
 * `UnityRelayClient`. The host relays every line it receives to its other clients.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { CliError, connectFailure, parseIntOption, UsageError } from '../../core/errors.js';
import {
  type ConnectionType,
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
}

const TRANSPORTS: readonly ConnectionType[] = ['udp', 'dtls', 'ws', 'wss'];

/** Client options from the chat flags: the transport, and for wss which certificates to trust. */
function clientOptions(opts: ChatOptions): UnityRelayClientOptions {
  if (!(TRANSPORTS as readonly string[]).includes(opts.transport))
    throw new UsageError(`--transport must be one of ${TRANSPORTS.join(', ')}`);
  const o: UnityRelayClientOptions = { connectionType: opts.transport as ConnectionType };
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

function status(text: string): void {
  process.stderr.write(`${text}\n`);
}

function short(id: Buffer): string {
  return id.toString('hex').slice(0, 8);
}

/** Runs until stdin ends or SIGINT/SIGTERM, then sends CLOSE. */
async function chat(client: UnityRelayClient, onLine: (line: string) => void): Promise<void> {
  const rl = createInterface({ input: process.stdin, terminal: false });
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    rl.on('line', (line) => {
      if (line.trim() !== '') onLine(line);
    });
    rl.on('close', stop);
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    client.on('error', (err: Error) => status(`socket error: ${err.message}`));
    client.on('relayError', (code: number) => {
      status(`relay ERROR ${code}`);
      if (code === 1 || code === 4) stop();
    });
  });
  rl.close();
  await client.close();
}

/** The error's message and its cause's (fetch says only "fetch failed"). */
function describe(err: unknown): string {
  const e = err as Error & { cause?: unknown };
  return e.cause instanceof Error ? `${e.message}: ${e.cause.message}` : String(e.message ?? e);
}

async function host(opts: ChatOptions): Promise<void> {
  const api = new RelayApiClient(opts.api, { apiKey: opts.apiKey });
  let started: Awaited<ReturnType<typeof UnityRelayClient.host>>;
  try {
    started = await UnityRelayClient.host(api, opts.maxConnections ?? 8, clientOptions(opts));
  } catch (err) {
    if (err instanceof UsageError) throw err;
    const hint = connectFailure(err, opts.api);
    if (hint instanceof CliError) throw hint;
    throw new CliError('ERR_RELAY', `could not host: ${describe(err)}`);
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
  const api = new RelayApiClient(opts.api, { apiKey: opts.apiKey });
  let client: UnityRelayClient;
  try {
    client = await UnityRelayClient.join(api, code, clientOptions(opts));
  } catch (err) {
    if (err instanceof UsageError) throw err;
    const hint = connectFailure(err, opts.api);
    if (hint instanceof CliError) throw hint;
    throw new CliError('ERR_RELAY', `could not join: ${describe(err)}`);
  }
  status(
    `connected to host ${short(client.hostId!)} through the relay over ${client.connectionType}; type lines to send`,
  );
  client.on('message', (data: Buffer) => process.stdout.write(`${data.toString('utf8')}\n`));
  client.on('disconnect', () => status('the host left'));
  await chat(client, (line) => {
    if (client.hostId !== undefined) client.send(Buffer.from(line));
  });
}

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
    .action(async (code: string, opts: ChatOptions) => join(code, opts));
}
