/**
 * LoginProtocol (HyperScape): LoginWithToken_V1 and Register_V1.
 *
 * Layout status (spec §1.4):
 * - Register_V1 arguments are **documented** (the seed: `List<StationURL>`). Its results are
 *   **inferred** from classic SecureConnection::Register and AlcatrazServer's named Register_V1:
 *   (Result retval, u32 pidConnectionID, StationURL urlPublic).
 * - LoginWithToken_V1: only the first request field (the UbiServices ticket, a String) and the
 *   first response field (User PID: UUID) are documented. The rest is **inferred** from Driver
 *   SF's LoginWithToken_V2 (ClientVersionInfo, RVConnectionData); the request tail `"prudp:/"`
 *   seen on the wiki fits RVConnectionData's last StationURL.
 */
import { createHash } from 'node:crypto';
import type { ProtocolMetrics } from '../../../core/metrics.js';
import { addressKey } from '../../../core/tcp.js';
import { struct } from '../../../wire/index.js';
import type { CallContext, Handlers, RmcConnection } from '../dispatcher.js';
import { RmcError } from '../errors.js';
import { defineProtocol, method } from '../signature.js';
import type { Account, AccountStore } from '../store.js';
import {
  formatStationUrl,
  list,
  parseStationUrl,
  qResult,
  qString,
  RESULT_SUCCESS,
  stationUrl,
  u8,
  u16,
  u32,
  uuid,
} from '../types.js';
import { RegistrationLimiter, type RegistrationLimits } from './rate-limit.js';

/** Inferred (Driver SF `ClientVersionInfo`): three u16 parts, a u32 build, a custom String. */
export const ClientVersionInfo = struct({ major: u16, minor: u16, patch: u16, build: u32, custom: qString });

/** Inferred (Driver SF `RVConnectionData`): regular URL, special protocol ids, special URL. */
export const RVConnectionData = struct({
  urlRegularProtocols: stationUrl,
  lstSpecialProtocols: list(u8),
  urlSpecialProtocols: stationUrl,
});

export const LoginProtocol = defineProtocol(
  'LoginProtocol',
  'Authenticates with a UbiServices ticket and registers the client station URLs.',
  {
    LoginWithToken_V1: method({
      args: { token: qString, clientVersionInfo: ClientVersionInfo, connectionData: RVConnectionData },
      results: { userPid: uuid, connectionData: RVConnectionData },
      layout: 'inferred',
      doc: 'token (documented), ClientVersionInfo and RVConnectionData (inferred from Driver SF V2) -> User PID UUID (documented), RVConnectionData (inferred)',
      secretFields: ['token'],
    }),
    Register_V1: method({
      args: { vecMyURLs: list(stationUrl) },
      results: { retval: qResult, pidConnectionID: u32, urlPublic: stationUrl },
      layout: 'inferred',
      doc: 'List<StationURL> (documented, the seed) -> Result, u32 connection id, public StationURL (inferred from classic Register)',
    }),
  },
);

/** What a token validator returns for a good ticket. Throw an RmcError for a bad one. */
export interface TokenIdentity {
  accountId: string;
  name: string;
  claims?: Record<string, unknown>;
}

export type TokenValidator = (token: string, ctx: CallContext) => TokenIdentity | Promise<TokenIdentity>;

/** Longest claim (sub, uid, userId, name, username) the default validator takes as is. */
const MAX_CLAIM_CHARS = 128;

function base64UrlJson(part: string): Record<string, unknown> | undefined {
  try {
    const v = JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The default validator, for development and private revival servers: it accepts any
 * non-empty ticket WITHOUT checking a signature. A JWT-shaped ticket gives its `sub` (or `uid`,
 * `userId`) and `name` (or `username`); anything else is identified by its SHA-256.
 * Production servers plug in a real validator.
 */
export const acceptAnyToken: TokenValidator = (token) => {
  if (token.length === 0) throw RmcError.of('RendezVous::InvalidUsername', 'empty ticket');
  const parts = token.split('.');
  const claims = parts.length === 3 ? base64UrlJson(parts[1]!) : undefined;
  // Claims are kept in the account store: long ones are ignored (the digest identifies instead).
  const str = (v: unknown) =>
    typeof v === 'string' && v !== '' && v.length <= MAX_CLAIM_CHARS ? v : undefined;
  const digest = createHash('sha256').update(token).digest('hex').slice(0, 32);
  const accountId = str(claims?.sub) ?? str(claims?.uid) ?? str(claims?.userId) ?? `ticket:${digest}`;
  const name = str(claims?.name) ?? str(claims?.username) ?? accountId;
  return claims === undefined ? { accountId, name } : { accountId, name, claims };
};

export interface LoginOptions {
  store: AccountStore;
  validateToken?: TokenValidator;
  /**
   * The StationURL sent back as urlRegularProtocols (default `prudp:/`); a function is asked on
   * every login (a fleet's auth server: the least-loaded live secure server).
   */
  secureUrl?: string | ((ctx: CallContext) => string | Promise<string>);
  /** The connection id Register_V1 answers (default the connection's own id; a fleet: unique over it). */
  connectionIdOf?: (conn: RmcConnection) => number | Promise<number>;
  /** Called once per connection after its first successful login (a fleet node counts its players). */
  onLogin?: (conn: RmcConnection) => void;
  /** Limits on new accounts per address and per server (defaults: 20 and 10 000 per hour). */
  registration?: RegistrationLimits | RegistrationLimiter;
  /** Counts refused registrations and logins (`registrations_refused`, `logins_refused`). */
  metrics?: ProtocolMetrics;
}

const LOGIN_HOOK_KEY = 'LoginProtocol.hooked';

/** How a refused registration's message starts (stores that enforce the limits use it too). */
export const REGISTRATION_REFUSED = 'too many new accounts';

export function loginHandlers(options: LoginOptions): Handlers<typeof LoginProtocol> {
  const validate = options.validateToken ?? acceptAnyToken;
  const { store } = options;
  const limiter =
    options.registration instanceof RegistrationLimiter
      ? options.registration
      : new RegistrationLimiter(options.registration);
  return {
    async LoginWithToken_V1(ctx, args) {
      const id = await validate(args.token, ctx);
      const conn = ctx.connection;
      // Where the client goes next, chosen before anything is written (a fleet may have no room).
      const secureUrl =
        typeof options.secureUrl === 'function'
          ? await options.secureUrl(ctx)
          : (options.secureUrl ?? 'prudp:/');
      // A synchronous store is used without awaiting, so the check, the limiter and the creation
      // below run as one step (pipelined logins of one new account count one registration).
      // A store that enforces the registration limits itself does it in the same atomic step as
      // the creation (a fleet); otherwise they are checked here, for new accounts only.
      const found = store.enforcesRegistrationLimits === true ? undefined : store.account(id.accountId);
      const isNew =
        store.enforcesRegistrationLimits !== true &&
        (found instanceof Promise ? await found : found) === undefined;
      if (isNew) {
        const refused = limiter.take(addressKey(conn.remoteAddress));
        if (refused !== undefined) {
          options.metrics?.count('registrations_refused');
          ctx.log.debug(
            { remote: conn.remoteAddress, limit: refused },
            'RMC registration refused: rate limit',
          );
          throw RmcError.of(
            'RendezVous::LimitExceeded',
            refused === 'address'
              ? 'too many new accounts from this address; try again later'
              : 'too many new accounts on this server; try again later',
          );
        }
      }
      let account: Account;
      try {
        const made = store.login(id.accountId, id.name, { address: addressKey(conn.remoteAddress) });
        account = made instanceof Promise ? await made : made;
      } catch (err) {
        if (err instanceof RmcError && err.message.startsWith(REGISTRATION_REFUSED))
          options.metrics?.count('registrations_refused');
        throw err;
      }
      // May refuse (ConcurrentLoginDenied) before the connection counts as logged in. A second
      // login on the same connection replaces the first one's session.
      try {
        await store.startSession({
          connectionId: conn.id,
          pid: account.pid,
          accountId: account.accountId,
          since: new Date().toISOString(),
        });
      } catch (err) {
        options.metrics?.count('logins_refused');
        throw err;
      }
      if (!conn.data.has(LOGIN_HOOK_KEY)) {
        conn.data.set(LOGIN_HOOK_KEY, true);
        conn.onDisconnect(() => store.endSession(conn.id));
        options.onLogin?.(conn);
      }
      const pid = Buffer.from(account.pid, 'hex');
      conn.user =
        id.claims === undefined
          ? { pid, name: account.name }
          : { pid, name: account.name, claims: id.claims };
      // A new account is on disk before the client learns its PID.
      if (isNew) await store.whenSaved?.();
      ctx.log.info({ accountId: account.accountId, connection: conn.id }, 'RMC login');
      return {
        userPid: pid,
        connectionData: {
          urlRegularProtocols: secureUrl,
          lstSpecialProtocols: [],
          urlSpecialProtocols: 'prudp:/',
        },
      };
    },
    Register_V1(ctx, args) {
      const conn = ctx.connection;
      const id = options.connectionIdOf === undefined ? conn.id : options.connectionIdOf(conn);
      return typeof id === 'number'
        ? register(conn, args.vecMyURLs, id)
        : id.then((n) => register(conn, args.vecMyURLs, n));
    },
  };
}

function register(conn: RmcConnection, urls: string[], pidConnectionID: number) {
  conn.stationUrls = urls;
  // An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d; StationURLs want a.b.c.d.
  const address = conn.remoteAddress.startsWith('::ffff:') ? conn.remoteAddress.slice(7) : conn.remoteAddress;
  // The public URL is the client's first URL as this server sees it (address and port
  // replaced by the observed ones), like a classic secure server's NAT check.
  let urlPublic = formatStationUrl({ scheme: 'prudp', params: { address, port: conn.remotePort } });
  const first = urls[0];
  if (first !== undefined) {
    try {
      const parts = parseStationUrl(first);
      parts.params.set('address', address);
      parts.params.set('port', String(conn.remotePort));
      urlPublic = formatStationUrl(parts);
    } catch {
      // An unparsable URL keeps the default.
    }
  }
  return { retval: RESULT_SUCCESS, pidConnectionID, urlPublic };
}
