/** CONNECT handling per profile: the classic Kerberos secure CONNECT, and client credentials for it. */

import type { ClientCredentials } from './client.js';
import { acceptSecureConnect, type KerberosAuthority, secureConnectBody } from './kerberos.js';
import { PrudpError, PrudpErrorCode } from './packet.js';
import { ClassicPayloadCodec } from './payload.js';
import { type ConnectHandler, plainConnect } from './server.js';

/**
 * Classic: an empty CONNECT is an auth-server connection; a non-empty one must carry a valid
 * Kerberos ticket and request (secure server). Both live on the same endpoint.
 */
export function classicConnectHandler(authority: KerberosAuthority): ConnectHandler {
  const codec = new ClassicPayloadCodec();
  return (payload, info) => {
    if (payload.length === 0) return plainConnect(payload, info);
    const body = codec.decode(payload, 4096);
    const { pid, ackBody } = acceptSecureConnect(authority, body);
    return {
      payload: new ClassicPayloadCodec(),
      ackPayload: codec.encode(ackBody),
      user: { pid, name: `pid:${pid}` },
    };
  };
}

/** Client credentials for a classic secure CONNECT, from the ticket TicketGranting issued. */
export function kerberosCredentials(t: {
  internal: Buffer;
  sessionKey: Buffer;
  pid: number;
  cid?: number;
}): ClientCredentials {
  const check = (Math.random() * 0x100000000) >>> 0;
  const codec = new ClassicPayloadCodec();
  return {
    connectPayload: () => codec.encode(secureConnectBody(t.internal, t.sessionKey, t.pid, t.cid ?? 0, check)),
    accept(ack) {
      const body = codec.decode(ack, 64);
      if (body.length !== 8 || body.readUInt32LE(0) !== 4 || body.readUInt32LE(4) !== (check + 1) >>> 0)
        throw new PrudpError(PrudpErrorCode.AUTH, 'CONNECT-ACK does not answer our response check');
      return new ClassicPayloadCodec();
    },
  };
}
