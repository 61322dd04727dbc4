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
 * The rest of every answer is checked too: the result, the connection id and the URL must be
 * what the connection's first answer said (the URL but for the number), so a changed bit anywhere
 * in an answer's results is a violation (`corrupt_response`).
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
import { parseStationUrl, RESULT_SUCCESS } from './types.js';

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

/** The number a public URL echoes (undefined when it does not read). */
function echoedSeq(url: string): string | undefined {
  try {
    return parseStationUrl(url).params.get('seq');
  } catch {
    return undefined;
  }
}

/** The results of Register (classic) and Register_V1 (HyperScape). */
export interface RegisterAnswer {
  retval: number;
  pidConnectionID: number;
  urlPublic: string;
}

/** What every Register answer on one connection must be, but for its call's number. */
export interface AnswerShape {
  pidConnectionID: number;
  /** The public URL up to the number (`…;seq=`). */
  head: string;
}

/**
 * The shape later answers must have, from the login's Register answer to `sent` (call 0): the
 * server replaces the address and the port with the ones it sees (and a classic secure server
 * sets type=3); every other parameter comes back as sent. A string when the answer itself is
 * wrong (it says what).
 */
export function answerShape(first: RegisterAnswer, sent: string): AnswerShape | string {
  if (first.retval !== RESULT_SUCCESS) return `result 0x${first.retval.toString(16)}`;
  let got: ReturnType<typeof parseStationUrl>;
  try {
    got = parseStationUrl(first.urlPublic);
  } catch {
    return `public URL ${JSON.stringify(first.urlPublic)}`;
  }
  const want = parseStationUrl(sent);
  const keys = [...got.params.keys()];
  if (
    got.scheme !== want.scheme ||
    keys.join(';') !== [...want.params.keys()].join(';') ||
    keys.at(-1) !== 'seq'
  )
    return `public URL ${first.urlPublic} for ${sent}`;
  for (const [k, v] of want.params) {
    const back = got.params.get(k)!;
    if (k === 'address' || k === 'port' || k === 'seq') continue;
    if (k === 'type' ? back !== v && back !== '3' : back !== v)
      return `public URL ${first.urlPublic} for ${sent}`;
  }
  const at = first.urlPublic.lastIndexOf(';seq=');
  return { pidConnectionID: first.pidConnectionID, head: first.urlPublic.slice(0, at + 5) };
}

/**
 * Checks the answer to call `seq` against the connection's shape, without allocating:
 * `mismatched` when it is intact but another call's (its number differs), `corrupt` when
 * anything else differs (result, connection id, any other character of the URL), undefined when
 * it is the right answer.
 */
export function checkAnswer(
  a: RegisterAnswer,
  seq: number,
  shape: AnswerShape,
): 'corrupt' | 'mismatched' | undefined {
  if (a.retval !== RESULT_SUCCESS || a.pidConnectionID !== shape.pidConnectionID) return 'corrupt';
  const url = a.urlPublic;
  const head = shape.head;
  const digits = url.length - head.length;
  if (digits < 1 || digits > 10 || !url.startsWith(head)) return 'corrupt';
  if (digits > 1 && url.charCodeAt(head.length) === 48) return 'corrupt';
  let n = 0;
  for (let i = head.length; i < url.length; i++) {
    const d = url.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return 'corrupt';
    n = n * 10 + d;
  }
  return n === seq ? undefined : 'mismatched';
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
      const register = (urls: string[]): Promise<RegisterAnswer> =>
        secure.call(SecureConnectionProtocol, 'Register', { vecMyURLs: urls });
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
    const register = (urls: string[]): Promise<RegisterAnswer> =>
      conn.call(LoginProtocol, 'Register_V1', { vecMyURLs: urls });
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
      const sentFirst = stationUrlFor(client.index, seq);
      const first = await register([sentFirst]);
      const echoedFirst = echoedSeq(first.urlPublic);
      const shape = answerShape(first, sentFirst);
      if (echoedFirst !== undefined && echoedFirst !== String(seq))
        stats.violation('mismatched_answer', `login Register of session ${client.index}: ${first.urlPublic}`);
      else if (typeof shape === 'string')
        stats.violation('corrupt_response', `login Register of session ${client.index}: ${shape}`);
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
            (answer) => {
              callLatency.record(performance.now() - sentAt);
              answered.add();
              countBytes();
              // Without a shape (the login's answer was wrong, and counted), only the number.
              const fault =
                typeof shape === 'string'
                  ? echoedSeq(answer.urlPublic) === String(mine)
                    ? undefined
                    : 'mismatched'
                  : checkAnswer(answer, mine, shape);
              if (fault !== undefined)
                stats.violation(
                  fault === 'corrupt' ? 'corrupt_response' : 'mismatched_answer',
                  `call #${mine} of session ${client.index} answered with result 0x${answer.retval.toString(16)}, ` +
                    `connection ${answer.pidConnectionID}, ${answer.urlPublic}`,
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
