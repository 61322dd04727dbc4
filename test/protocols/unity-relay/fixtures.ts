/**
 * Byte arrays from Unity's own Relay tests (com.unity.transport 1.x, Tests/Editor/Utilities/
 * RelayServerMock.cs): what a real Unity Transport client sends and accepts. Allocation ids there
 * are synthetic: an int32 written little-endian into bytes 0..3 (host = -1).
 */
export const UNITY_CONNECTION_DATA_B64 =
  'sGsP0X8REiXn+PS51+lQDPBjowDlvV5zPgh15puL5YXFd3XdQ/oHkXh0a+m8A3riVvtUdZvZloYNpsi19flB6cvfpXNvib9SQ5UUMH0V+hNVExAog21jLA7PlBPp2eLHtKeCRflhR2pSq6FmRplmXLfdu4fV3eCgruvpr/pr6lVxeATN5k13OiY4lnEv5otyUsfkKFyIO+Sann97MsEklKgoAtVmlw6QurBVb+W3GDIyAHYF15UrQkkHE46fBkCbgFdry2hDQjn+6uXnxC3LVPfJw0jS4FpdbLfiUik/qATkZyX9eu97PNLw9lL1aogDLRG/ztmpi4Slwpl3awXr';
export const UNITY_KEY_B64 =
  'cSzQ2I5ZCQ7vnHMt9fDB2/+xDkL2VUKoUT7AVNYhe+kaTQLptQ0gUbco/Qgiicow89VtxOXcw92IozbdDG848w==';

export const UNITY_CONNECTION_DATA = Buffer.from(UNITY_CONNECTION_DATA_B64, 'base64');
export const UNITY_KEY = Buffer.from(UNITY_KEY_B64, 'base64');

/** `BindPacket`: nonce 23 (bytes 17 00), length 255, connection data, HMAC. */
export const UNITY_BIND_HEX =
  'da720000' +
  '00' +
  '1700' +
  'ff' +
  UNITY_CONNECTION_DATA.toString('hex') +
  '515f838630585f99fc959376284109f26b62433f70292338c0cfd5dd74787f09';

/** The HMAC bytes of `BindPacket`. */
export const UNITY_BIND_HMAC_HEX = '515f838630585f99fc959376284109f26b62433f70292338c0cfd5dd74787f09';

/** Allocation id of mock client `key` (host = 0 → -1). */
export function mockAllocationId(key: number): Buffer {
  const id = Buffer.alloc(16);
  id.writeInt32LE(key === 0 ? -1 : key, 0);
  return id;
}

export const UNITY_BIND_RECEIVED_HEX = 'da720001';
/** PingPacket (1.5.0, with the sequence number 01 00) for the host. */
export const UNITY_PING_HEX = 'da720002ffffffff0000000000000000000000000100';
/** ConnectRequestPacket after SetupForConnect(1). */
export const UNITY_CONNECT_REQUEST_HEX = `da72000301000000000000000000000000000000ff${UNITY_CONNECTION_DATA.toString('hex')}`;
/** AcceptedPacket after SetupForConnect(1): From = host, To = client 1. */
export const UNITY_ACCEPTED_HEX = 'da720006ffffffff00000000000000000000000001000000000000000000000000000000';
/** RelayPacket from client 1 to the host with a 13-byte UTP 2.x handshake as content. */
export const UNITY_RELAY_HEX =
  'da72000a01000000000000000000000000000000ffffffff000000000000000000000000000d5554500101' +
  '0102030405060708';
/** DisconnectPacket. */
export const UNITY_DISCONNECT_HEX =
  'da720009ffffffff00000000000000000000000001000000000000000000000000000000';
/** ErrorNotFoundPacket for the host. */
export const UNITY_ERROR_4_HEX = 'da72000cffffffff00000000000000000000000004';
/** ErrorTimedOutPacket for the host. */
export const UNITY_ERROR_1_HEX = 'da72000cffffffff00000000000000000000000001';
