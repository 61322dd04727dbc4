/**
 * TicketGranting (protocol 10), the classic Rendez-Vous authentication server's protocol:
 * Login (1), LoginEx (2), RequestTicket (3). Layouts are the documented classic ones (NEX /
 * Quazal TicketGranting; the Ubisoft captures show the same fields).
 *
 * Accounts come from the RMC store (created on first login). The store keeps no passwords:
 * a user's Kerberos key derives from `passwordFor(name)` (default: one server-wide password),
 * through a UserKeyCache (worker threads, never the event loop; see prudp/user-keys.ts).
 * The Login response names the secure server with a `prudps:/` StationURL (PID 2).
 */
import { addressKey } from '../../../core/tcp.js';
import type { CallContext, Handlers } from '../dispatcher.js';
import { RmcError } from '../errors.js';
import { type KerberosAuthority, SECURE_SERVER_PID } from '../prudp/kerberos.js';
import { KeyDerivationBusyError, UserKeyCache } from '../prudp/user-keys.js';
import { defineProtocol, method } from '../signature.js';
import type { AccountStore } from '../store.js';
import { anyDataHolder, buffer32, qResult, qString, RESULT_SUCCESS, u32 } from '../types.js';
import { RVConnectionData } from './login.js';

const loginResults = {
  retval: qResult,
  pidPrincipal: u32,
  pbufResponse: buffer32,
  pConnectionData: RVConnectionData,
  strReturnMsg: qString,
};

export const TicketGrantingProtocol = defineProtocol(
  'TicketGrantingProtocol',
  'Classic Rendez-Vous authentication: logs a user in and issues Kerberos tickets for the secure server.',
  {
    Login: method({
      id: 1,
      args: { strUserName: qString },
      results: loginResults,
      layout: 'documented',
      doc: 'user name -> Result, PID, Kerberos ticket (Buffer), RVConnectionData (secure server URL), message',
      secretFields: ['pbufResponse'],
    }),
    LoginEx: method({
      id: 2,
      args: { strUserName: qString, oExtraData: anyDataHolder },
      results: loginResults,
      layout: 'documented',
      doc: 'Login with extra data (an AnyDataHolder, not interpreted)',
      secretFields: ['oExtraData', 'pbufResponse'],
    }),
    RequestTicket: method({
      id: 3,
      args: { idSource: u32, idTarget: u32 },
      results: { retval: qResult, bufResponse: buffer32 },
      layout: 'documented',
      doc: 'a Kerberos ticket from the logged-in user (idSource) for a target PID (2 = the secure server)',
      secretFields: ['bufResponse'],
    }),
  },
  { id: 10 },
);

export interface TicketGrantingOptions {
  store: AccountStore;
  authority: KerberosAuthority;
  /** The user's password (its Kerberos key derives from it); undefined refuses the login. */
  passwordFor: (name: string) => string | undefined;
  /**
   * The secure server's StationURL (`prudps:/address=…;port=…;CID=1;PID=2;sid=1;stream=3;type=2`);
   * a function is asked on every login (a fleet: the least-loaded live secure server).
   */
  secureUrl: string | ((ctx: CallContext) => string | Promise<string>);
  /** Longest user name accepted (default 64 bytes). */
  maxUserNameBytes?: number;
  /** Where user keys come from (default: a cache of its own over the process's worker pool). */
  userKeys?: UserKeyCache;
}

const LOGGED_IN = 'TicketGranting.pid';
const USER_KEY = 'TicketGranting.key';
/** A Login under way on the connection (its key is being derived): RequestTicket waits for it. */
const LOGGING_IN = 'TicketGranting.pending';

/** The u32 PID of an account: from its 16-byte store PID, kept clear of the server PIDs (< 0x1000). */
export function classicPid(storePidHex: string): number {
  const v = Buffer.from(storePidHex, 'hex').readUInt32LE(0);
  return v < 0x1000 ? v + 0x1000 : v;
}

/** The user key, or the login refused with the protocol's own error when the server is too busy. */
async function keyOrRefuse(keys: UserKeyCache, pid: number, password: string): Promise<Buffer> {
  try {
    return await keys.key(pid, password);
  } catch (err) {
    if (err instanceof KeyDerivationBusyError)
      throw RmcError.of('RendezVous::ConnectionFailure', 'the server is busy; try again');
    throw err;
  }
}

export function ticketGrantingHandlers(o: TicketGrantingOptions): Handlers<typeof TicketGrantingProtocol> {
  const maxName = o.maxUserNameBytes ?? 64;
  const keys = o.userKeys ?? new UserKeyCache();
  const login = async (ctx: CallContext, name: string) => {
    if (name.length === 0 || Buffer.byteLength(name) > maxName)
      throw RmcError.of('RendezVous::InvalidUsername', 'empty or over-long user name');
    const password = o.passwordFor(name);
    if (password === undefined) throw RmcError.of('RendezVous::InvalidUsername', `no account ${name}`);
    const secureUrl = typeof o.secureUrl === 'function' ? await o.secureUrl(ctx) : o.secureUrl;
    const account = await o.store.login(`classic:${name}`, name, {
      address: addressKey(ctx.connection.remoteAddress),
    });
    const pid = classicPid(account.pid);
    const key = await keyOrRefuse(keys, pid, password);
    const { sealed } = o.authority.userTicket(pid, key, SECURE_SERVER_PID);
    const conn = ctx.connection;
    conn.data.set(LOGGED_IN, pid);
    conn.data.set(USER_KEY, key);
    const pidBytes = Buffer.alloc(4);
    pidBytes.writeUInt32LE(pid);
    conn.user = { pid: pidBytes, name: account.name };
    ctx.log.info({ name, pid, connection: conn.id }, 'TicketGranting login');
    return {
      retval: RESULT_SUCCESS,
      pidPrincipal: pid,
      pbufResponse: sealed,
      pConnectionData: {
        urlRegularProtocols: secureUrl,
        lstSpecialProtocols: [],
        urlSpecialProtocols: 'prudp:/',
      },
      strReturnMsg: '',
    };
  };
  /** Calls arrive in order on a connection: a RequestTicket sent behind a Login sees its outcome. */
  const ordered = (ctx: CallContext, name: string) => {
    const conn = ctx.connection;
    const p = login(ctx, name);
    const settled = p.then(
      () => undefined,
      () => undefined,
    );
    conn.data.set(LOGGING_IN, settled);
    void settled.then(() => {
      if (conn.data.get(LOGGING_IN) === settled) conn.data.delete(LOGGING_IN);
    });
    return p;
  };
  return {
    Login: (ctx, args) => ordered(ctx, args.strUserName),
    LoginEx: (ctx, args) => ordered(ctx, args.strUserName),
    async RequestTicket(ctx, args) {
      const pending = ctx.connection.data.get(LOGGING_IN) as Promise<void> | undefined;
      if (pending !== undefined) await pending;
      const pid = ctx.connection.data.get(LOGGED_IN) as number | undefined;
      const key = ctx.connection.data.get(USER_KEY) as Buffer | undefined;
      if (pid === undefined || key === undefined)
        throw RmcError.of('RendezVous::NotAuthenticated', 'log in first');
      if (args.idSource !== pid)
        throw RmcError.of('RendezVous::PermissionDenied', 'tickets only for yourself');
      if (args.idTarget !== SECURE_SERVER_PID) throw RmcError.of('RendezVous::InvalidPID', 'unknown target');
      // The key the Login derived: a ticket costs no derivation.
      const { sealed } = o.authority.userTicket(pid, key, args.idTarget);
      return { retval: RESULT_SUCCESS, bufResponse: sealed };
    },
  };
}
