/** Wire constants of the DTLS 1.2 subset gamewire speaks (RFC 6347, RFC 5246, RFC 4279). */

export const ContentType = {
  changeCipherSpec: 20,
  alert: 21,
  handshake: 22,
  applicationData: 23,
} as const;

export const HandshakeType = {
  helloRequest: 0,
  clientHello: 1,
  serverHello: 2,
  helloVerifyRequest: 3,
  serverHelloDone: 14,
  clientKeyExchange: 16,
  finished: 20,
} as const;

export const AlertLevel = { warning: 1, fatal: 2 } as const;

export const AlertDescription = {
  closeNotify: 0,
  unexpectedMessage: 10,
  badRecordMac: 20,
  handshakeFailure: 40,
  illegalParameter: 47,
  decodeError: 50,
  decryptError: 51,
  protocolVersion: 70,
  internalError: 80,
  noRenegotiation: 100,
  unknownPskIdentity: 115,
} as const;

/** DTLS 1.2 on the wire (one's complement of 1.2: 0xfefd). */
export const DTLS_1_2 = 0xfefd;
/** DTLS 1.0: the record version of a first ClientHello and of HelloVerifyRequest (RFC 6347 §4.2.1). */
export const DTLS_1_0 = 0xfeff;

export const ExtensionType = {
  serverName: 0x0000,
  extendedMasterSecret: 0x0017,
  renegotiationInfo: 0xff01,
} as const;

/** The signalling cipher suite value of RFC 5746 §3.3. */
export const EMPTY_RENEGOTIATION_INFO_SCSV = 0x00ff;

export const RECORD_HEADER_LENGTH = 13;
export const HANDSHAKE_HEADER_LENGTH = 12;
/** Sequence numbers are 48 bits (RFC 6347 §4.1); a connection must never wrap them. */
export const MAX_SEQUENCE = 2 ** 48 - 1;
export const COOKIE_LENGTH = 32;
export const RANDOM_LENGTH = 32;
export const VERIFY_DATA_LENGTH = 12;
export const MASTER_SECRET_LENGTH = 48;
