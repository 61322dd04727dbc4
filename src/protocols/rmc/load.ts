/**
 * `gamewire load rmc`: players that log in and then make calls at a rate, over PRUDP or TCP.
 *
 * - `--prudp-profile classic` (PRUDP): the Rendez-Vous ladder of the classic titles. An empty
 *   CONNECT to the auth server, TicketGranting Login, RequestTicket for the secure server, the
 *   ticket opened with the user's key, a second connection whose CONNECT carries the ticket to
 *   the StationURL the login named, then SecureConnection Register; calls are more Registers.
 * - `--prudp-profile hyperscape` (PRUDP with the ECDH CONNECT, or TCP): LoginWithToken_V1,
 *   then Register_V1 calls.
 *
 * Each call's StationURL carries a sequence number that the answer must echo (the server puts
 * the client's first URL back with its own address): an answer for another call, or a second
 * answer to one call, is an integrity violation; a call that gets no answer fails the session.
 * User names (tokens) are the prefix and the client slot, so churned players log in again as
 * the same accounts instead of registering new ones.
 */
import { UsageError } from '../../core/errors.js';
import { type LoadClient, type LoadDefinition, type LoadRun, untilStopped } from '../../core/load/index.js';
import { RmcClient, RmcClientError, type RmcClientOptions } from './client.js';
import { LoginProtocol } from './protocols/login.js';
import { SecureConnectionProtocol } from './protocols/secure-connection.js';
import { TicketGrantingProtocol } from './protocols/ticket-granting.js';
import { keyFromTable, openUserTicket, userKeyTable } from './prudp/kerberos.js';
import { kerberosCredentials } from './prudp/profiles.js';
import { ecdhCredentials } from './prudp/secure.js';
import { parseStationUrl } from './types.js';

const DEFAULT_PORT = 9103;

interface RmcLoadOptions {
  transport: 'prudp' | 'tcp';
  profile: 'classic' | 'hyperscape';
  accessKey: string;
  checksum: 1 | 4;
  password: string;
  userPrefix: string;
  callRate: number;
  callTimeoutMs: number;
}

/**
 * A user key costs 65,000+ MD5 rounds, but one password has only 1024 keys, consecutive links of
 * one chain: derived once per password (one derivation's cost), every player's key is a lookup.
 */
const keyTables = new Map<string, Buffer>();
function userKey(pid: number, password: string): Buffer {
  let table = keyTables.get(password);
  if (table === undefined) {
    table = userKeyTable(password);
    if (keyTables.size >= 16) keyTables.clear();
    keyTables.set(password, table);
  }
  return keyFromTable(table, pid);
}

function stationUrlFor(index: number, seq: number): string {
  return `prudp:/address=127.0.0.1;port=${5000 + (index % 50_000)};sid=15;type=2;seq=${seq}`;
}

async function prepare(run: LoadRun) {
  const raw = run.options;
  const o: RmcLoadOptions = {
    transport: raw.transport as RmcLoadOptions['transport'],
    profile: raw.prudpProfile as RmcLoadOptions['profile'],
    accessKey: raw.accessKey as string,
    checksum: Number(raw.checksum) as 1 | 4,
    password: raw.password as string,
    userPrefix: raw.userPrefix as string,
    callRate: raw.callRate as number,
    callTimeoutMs: raw.callTimeoutMs as number,
  };
  if (o.transport === 'tcp' && o.profile === 'classic')
    throw new UsageError('--prudp-profile classic needs --transport prudp (the Kerberos ladder is PRUDP)');
  const target = run.settings.target;
  if (target === undefined) throw new UsageError('gamewire load rmc needs --target HOST:PORT');
  const { stats } = run;
  const join = stats.latency('join');
  const callLatency = stats.latency('call');
  const logins = stats.counter('logins');
  const calls = stats.counter('calls');
  const answered = stats.counter('answered');

  const base = (client: LoadClient): RmcClientOptions => ({
    host: target.host,
    port: target.port,
    timeoutMs: o.callTimeoutMs,
    connectTimeoutMs: 10_000,
    ...(client.localAddress === undefined ? {} : { localAddress: client.localAddress }),
    ...(o.transport === 'prudp'
      ? { transport: 'prudp' as const, accessKey: o.accessKey, prudp: { checksumWidth: o.checksum } }
      : {}),
  });

  /** Logs in; resolves with the connection calls go over and the method they call. */
  const login = async (client: LoadClient, connections: RmcClient[]) => {
    const name = `${o.userPrefix}${client.slot}`;
    if (o.profile === 'classic') {
      const options: RmcClientOptions = { ...base(client), variant: 'classic' };
      const auth = await RmcClient.connect(options);
      connections.push(auth);
      const answer = await auth.call(TicketGrantingProtocol, 'Login', { strUserName: name });
      const pid = answer.pidPrincipal;
      const ticketAnswer = await auth.call(TicketGrantingProtocol, 'RequestTicket', {
        idSource: pid,
        idTarget: 2,
      });
      const ticket = openUserTicket(ticketAnswer.bufResponse, userKey(pid, o.password));
      if (ticket === undefined)
        throw new RmcClientError('ERR_RMC_TICKET', `the ticket for ${name} does not open with --password`);
      const url = parseStationUrl(answer.pConnectionData.urlRegularProtocols);
      const host = url.params.get('address') ?? target.host;
      const port = Number(url.params.get('port') ?? target.port);
      await run.allow(host, "the login's secure server");
      void auth.close();
      const secure = await RmcClient.connect({
        ...options,
        host,
        port,
        prudp: {
          checksumWidth: o.checksum,
          credentials: kerberosCredentials({ internal: ticket.internal, sessionKey: ticket.sessionKey, pid }),
        },
      });
      connections.push(secure);
      const register = (urls: string[]) =>
        secure.call(SecureConnectionProtocol, 'Register', { vecMyURLs: urls }).then((r) => r.urlPublic);
      return { connection: secure, register };
    }
    const options: RmcClientOptions = {
      ...base(client),
      ...(o.transport === 'prudp'
        ? { prudp: { checksumWidth: o.checksum, credentials: ecdhCredentials() } }
        : {}),
    };
    const conn = await RmcClient.connect(options);
    connections.push(conn);
    await conn.call(LoginProtocol, 'LoginWithToken_V1', {
      token: name,
      clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 1, custom: 'gamewire-load' },
      connectionData: {
        urlRegularProtocols: 'prudp:/',
        lstSpecialProtocols: [],
        urlSpecialProtocols: 'prudp:/',
      },
    });
    const register = (urls: string[]) =>
      conn.call(LoginProtocol, 'Register_V1', { vecMyURLs: urls }).then((r) => r.urlPublic);
    return { connection: conn, register };
  };

  const session = async (client: LoadClient): Promise<void> => {
    const started = performance.now();
    const connections: RmcClient[] = [];
    const closeAll = () => {
      for (const c of connections) void c.close();
    };
    client.signal.addEventListener('abort', closeAll, { once: true });
    let timer: NodeJS.Timeout | undefined;
    let unmatchedBefore = 0;
    const counted = new Map<RmcClient, [number, number]>();
    const countBytes = () => {
      for (const c of connections) {
        const [inBefore, outBefore] = counted.get(c) ?? [0, 0];
        stats.bytesIn.add(c.bytesReceived - inBefore);
        stats.bytesOut.add(c.bytesSent - outBefore);
        counted.set(c, [c.bytesReceived, c.bytesSent]);
      }
    };
    let main: RmcClient | undefined;
    try {
      const { connection, register } = await login(client, connections);
      main = connection;
      // The login's own Register: the client is in once it answers.
      let seq = 0;
      const first = await register([stationUrlFor(client.index, seq)]);
      if (parseStationUrl(first).params.get('seq') !== String(seq))
        stats.violation('mismatched_answer', `login Register of session ${client.index}: ${first}`);
      seq++;
      client.signal.removeEventListener('abort', closeAll);
      if (client.signal.aborted) return;
      join.record(performance.now() - started);
      logins.add();
      client.joined();
      unmatchedBefore = connection.unmatched;
      const inFlight = new Set<Promise<void>>();
      await untilStopped(client.signal, (reject) => {
        if (o.callRate <= 0) return;
        const call = () => {
          const mine = seq++;
          const sentAt = performance.now();
          calls.add();
          const p = register([stationUrlFor(client.index, mine)]).then(
            (url) => {
              callLatency.record(performance.now() - sentAt);
              answered.add();
              countBytes();
              let echoed: string | undefined;
              try {
                echoed = parseStationUrl(url).params.get('seq');
              } catch {
                echoed = undefined;
              }
              if (echoed !== String(mine))
                stats.violation(
                  'mismatched_answer',
                  `call #${mine} of session ${client.index} answered with ${url}`,
                );
            },
            (err: Error) => {
              if (!client.signal.aborted) reject(err);
              else stats.violation('lost_call', `call #${mine} of session ${client.index}: ${err.message}`);
            },
          );
          inFlight.add(p);
          void p.finally(() => inFlight.delete(p));
        };
        const period = 1000 / o.callRate;
        timer = setTimeout(() => {
          call();
          timer = setInterval(call, period);
        }, Math.random() * period);
      });
      // Leaving: no new calls; the ones under way get their answers first (a client logs out
      // after its last call), so an unanswered call is one the server or the path lost.
      clearTimeout(timer);
      clearInterval(timer);
      await Promise.allSettled(inFlight);
    } finally {
      clearTimeout(timer);
      clearInterval(timer);
      client.signal.removeEventListener('abort', closeAll);
      if (main !== undefined && main.unmatched > unmatchedBefore)
        stats.violation(
          'duplicate_answer',
          `${main.unmatched - unmatchedBefore} answers matched no call (session ${client.index})`,
        );
      await Promise.allSettled(connections.map((c) => c.close()));
      countBytes();
    }
  };

  return { session };
}

export const rmcLoad: LoadDefinition = {
  summary: 'players that log in (classic Kerberos over PRUDP, or HyperScape over PRUDP/TCP) and make calls',
  clientNoun: 'player',
  defaultPort: DEFAULT_PORT,
  options: [
    {
      flag: '--transport <t>',
      key: 'transport',
      description: 'prudp (UDP) or tcp',
      type: 'string',
      choices: ['prudp', 'tcp'],
      default: 'prudp',
    },
    {
      flag: '--prudp-profile <p>',
      key: 'prudpProfile',
      description:
        "hyperscape (LoginWithToken_V1; ECDH CONNECT over PRUDP) or classic (Kerberos ticket, then the secure server; the server's --prudp-profile classic)",
      type: 'string',
      choices: ['hyperscape', 'classic'],
      default: 'hyperscape',
    },
    {
      flag: '--access-key <key>',
      key: 'accessKey',
      description: "PRUDP sandbox access key (the server's --prudp-access-key; its default learns any key)",
      type: 'string',
      default: 'yl4NG7qZ',
      secret: true,
    },
    {
      flag: '--checksum <width>',
      key: 'checksum',
      description: 'PRUDP checksum width, 1 or 4',
      type: 'string',
      choices: ['1', '4'],
      default: '1',
    },
    {
      flag: '--password <pass>',
      key: 'password',
      description: "classic: the accounts' password (the server's --prudp-password)",
      type: 'string',
      default: 'gamewire',
      secret: true,
    },
    {
      flag: '--user-prefix <text>',
      key: 'userPrefix',
      description: 'user names (tokens) are this prefix and the client slot',
      type: 'string',
      default: 'load-',
    },
    {
      flag: '--call-rate <per-second>',
      key: 'callRate',
      description: 'calls per second per player after login (0: log in only)',
      type: 'number',
      min: 0,
      max: 100_000,
      default: 1,
    },
    {
      flag: '--call-timeout-ms <ms>',
      key: 'callTimeoutMs',
      description: 'a call (login steps included) unanswered this long fails its session',
      type: 'int',
      min: 100,
      max: 600_000,
      default: 10_000,
    },
  ],
  progress: { rates: ['answered', 'logins'], latencies: ['join', 'call'] },
  prepare,
};
