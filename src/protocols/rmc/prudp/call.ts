/**
 * `gamewire rmc call --transport prudp`: how the CLI connects over PRUDP.
 *
 * - hyperscape variant: the ECDH secure CONNECT (AES DATA), like the game client;
 * - classic variant without `--user`: an empty CONNECT (an auth-server connection);
 * - classic with `--user NAME --password PASS`: the whole Kerberos ladder (TicketGranting Login,
 *   the ticket for PID 2, a secure CONNECT to the StationURL the login names), then the call.
 */
import { UsageError } from '../../../core/errors.js';
import { RmcClient, type RmcClientOptions } from '../client.js';
import { TicketGrantingProtocol } from '../protocols/ticket-granting.js';
import { parseStationUrl } from '../types.js';
import { deriveUserKey, openUserTicket } from './kerberos.js';
import { kerberosCredentials } from './profiles.js';
import { ecdhCredentials } from './secure.js';

export interface PrudpCallFlags {
  accessKey?: string;
  checksum?: string;
  user?: string;
  password?: string;
}

export async function connectForCall(base: RmcClientOptions, flags: PrudpCallFlags): Promise<RmcClient> {
  if (flags.accessKey === undefined) throw new UsageError('--transport prudp needs --access-key KEY');
  if (flags.checksum !== undefined && flags.checksum !== '1' && flags.checksum !== '4')
    throw new UsageError('--checksum takes 1 or 4');
  const width = flags.checksum === '4' ? 4 : 1;
  const options: RmcClientOptions = {
    ...base,
    transport: 'prudp',
    accessKey: flags.accessKey,
    prudp: { checksumWidth: width },
  };
  if (base.variant !== 'classic') {
    return RmcClient.connect({ ...options, prudp: { checksumWidth: width, credentials: ecdhCredentials() } });
  }
  if (flags.user === undefined) return RmcClient.connect(options);
  if (flags.password === undefined) throw new UsageError('--user needs --password');
  const auth = await RmcClient.connect(options);
  let secureOptions: RmcClientOptions;
  try {
    const login = await auth.call(TicketGrantingProtocol, 'Login', { strUserName: flags.user });
    const pid = login.pidPrincipal;
    const key = deriveUserKey(pid, flags.password);
    const rt = await auth.call(TicketGrantingProtocol, 'RequestTicket', { idSource: pid, idTarget: 2 });
    const ticket = openUserTicket(rt.bufResponse, key);
    if (ticket === undefined) throw new UsageError('the ticket does not open with that password');
    const url = parseStationUrl(login.pConnectionData.urlRegularProtocols);
    const host = url.params.get('address') ?? base.host;
    const port = Number(url.params.get('port') ?? base.port);
    secureOptions = {
      ...options,
      host,
      port,
      prudp: {
        checksumWidth: width,
        credentials: kerberosCredentials({ internal: ticket.internal, sessionKey: ticket.sessionKey, pid }),
      },
    };
  } finally {
    await auth.close();
  }
  return RmcClient.connect(secureOptions);
}
