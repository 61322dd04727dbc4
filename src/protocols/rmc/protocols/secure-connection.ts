/**
 * SecureConnection (protocol 11), the classic secure server's protocol: Register (1) and
 * RegisterEx (4). Only a connection that presented a valid Kerberos ticket in its PRUDP CONNECT
 * may register. The public URL is the client's first URL with the address and port this server
 * sees, flagged `type=3` (public, behind NAT), as the official server answers.
 */
import type { CallContext, Handlers, RmcConnection } from '../dispatcher.js';
import { RmcError } from '../errors.js';
import { defineProtocol, method } from '../signature.js';
import {
  anyDataHolder,
  formatStationUrl,
  list,
  parseStationUrl,
  qResult,
  RESULT_SUCCESS,
  stationUrl,
  u32,
} from '../types.js';

const registerResults = { retval: qResult, pidConnectionID: u32, urlPublic: stationUrl };

export const SecureConnectionProtocol = defineProtocol(
  'SecureConnectionProtocol',
  'Classic Rendez-Vous secure server: registers the station URLs of an authenticated client.',
  {
    Register: method({
      id: 1,
      args: { vecMyURLs: list(stationUrl) },
      results: registerResults,
      layout: 'documented',
      doc: 'the client URLs -> Result, connection id, the public URL as the server sees it',
    }),
    RegisterEx: method({
      id: 4,
      args: { vecMyURLs: list(stationUrl), hCustomData: anyDataHolder },
      results: registerResults,
      layout: 'documented',
      doc: 'Register with custom data (an AnyDataHolder, not interpreted)',
      secretFields: ['hCustomData'],
    }),
  },
  { id: 11 },
);

/** The key a PRUDP secure CONNECT stores the Kerberos-authenticated PID under. */
export const SECURE_PID_KEY = 'prudp.pid';

export interface SecureConnectionOptions {
  /** Most URLs accepted in one Register (default 16). */
  maxUrls?: number;
  /** The connection id Register answers (default the connection's own id; a fleet: unique over it). */
  connectionIdOf?: (conn: RmcConnection) => number | Promise<number>;
  /** Called once per connection at its first Register (a fleet node counts its players). */
  onRegister?: (conn: RmcConnection) => void;
}

const REGISTERED_KEY = 'SecureConnection.registered';

export function secureConnectionHandlers(
  o: SecureConnectionOptions = {},
): Handlers<typeof SecureConnectionProtocol> {
  const maxUrls = o.maxUrls ?? 16;
  const register = (ctx: CallContext, urls: string[]) => {
    const conn = ctx.connection;
    if (!conn.data.has(SECURE_PID_KEY))
      throw RmcError.of(
        'RendezVous::NotAuthenticated',
        'connect to the secure endpoint with a Kerberos ticket first',
      );
    if (urls.length > maxUrls) throw RmcError.of('RendezVous::LimitExceeded', `more than ${maxUrls} URLs`);
    const id = o.connectionIdOf === undefined ? conn.id : o.connectionIdOf(conn);
    return typeof id === 'number' ? answer(conn, urls, id) : id.then((n) => answer(conn, urls, n));
  };
  const answer = (conn: RmcConnection, urls: string[], pidConnectionID: number) => {
    conn.stationUrls = urls;
    if (!conn.data.has(REGISTERED_KEY)) {
      conn.data.set(REGISTERED_KEY, true);
      o.onRegister?.(conn);
    }
    const address = conn.remoteAddress.startsWith('::ffff:')
      ? conn.remoteAddress.slice(7)
      : conn.remoteAddress;
    let urlPublic = formatStationUrl({
      scheme: 'prudp',
      params: { address, port: conn.remotePort, sid: 15, type: 3 },
    });
    const first = urls[0];
    if (first !== undefined) {
      try {
        const parts = parseStationUrl(first);
        parts.params.set('address', address);
        parts.params.set('port', String(conn.remotePort));
        parts.params.set('type', '3');
        urlPublic = formatStationUrl(parts);
      } catch {
        // An unparsable URL keeps the default.
      }
    }
    return { retval: RESULT_SUCCESS, pidConnectionID, urlPublic };
  };
  return {
    Register: (ctx, args) => register(ctx, args.vecMyURLs),
    RegisterEx: (ctx, args) => register(ctx, args.vecMyURLs),
  };
}
