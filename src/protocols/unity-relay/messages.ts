/**
 * The Unity Relay message protocol, declared once, as the Unity Transport (UTP) client writes it
 * (com.unity.transport, Runtime/Relay/Messages). Every message starts with the 4-byte header
 * `DA 72 | version 0 | type`. Byte order is per field: the BIND nonce and the PING sequence
 * number are little-endian (UTP copies host-order ushorts), only the RELAY data length is
 * big-endian (UTP byte-swaps it explicitly). Allocation ids, connection data and the HMAC are
 * opaque byte arrays.
 */
import { createHmac } from 'node:crypto';
import {
  bytes,
  constant,
  decode,
  doc,
  encode,
  type Infer,
  message,
  struct,
  t,
  union,
} from '../../wire/codec.js';
import { EncodeError, ErrorCode } from '../../wire/errors.js';

/** Sizes the client asserts (`RelayCheckStructSizes`). */
export const HEADER_LENGTH = 4;
export const ALLOCATION_ID_LENGTH = 16;
export const CONNECTION_DATA_LENGTH = 255;
export const HMAC_KEY_LENGTH = 64;
export const HMAC_LENGTH = 32;
/** The HMAC covers the BIND up to (not including) the HMAC itself. */
export const BIND_SIGNED_LENGTH = 263;
export const BIND_LENGTH = 295;
export const BIND_RECEIVED_LENGTH = 4;
export const PING_LENGTH = 22;
export const CONNECT_REQUEST_LENGTH = 276;
export const ACCEPTED_LENGTH = 36;
export const REJECTED_LENGTH = 36;
export const DISCONNECT_LENGTH = 36;
export const RELAY_HEADER_LENGTH = 38;
export const CLOSE_LENGTH = 20;
export const ERROR_LENGTH = 21;

/** Type codes (byte 3 of the header). */
export const MessageType = {
  BIND: 0,
  BIND_RECEIVED: 1,
  PING: 2,
  CONNECT_REQUEST: 3,
  ACCEPTED: 6,
  REJECTED: 8,
  DISCONNECT: 9,
  RELAY: 10,
  CLOSE: 11,
  ERROR: 12,
} as const;

/** ERROR codes and what UTP 2.x does with them (spec §1.12). */
export const RelayErrorCode = {
  /** Log only. */
  INVALID_PROTOCOL_VERSION: 0,
  /** Fatal for the client (AllocationInvalid). */
  TIMEOUT: 1,
  /** Log only. */
  UNAUTHORIZED: 2,
  /** The client increments its nonce and binds again ("our IP has changed"). */
  CLIENT_PLAYER_MISMATCH: 3,
  /** Fatal for the client (AllocationInvalid). */
  ALLOCATION_NOT_FOUND: 4,
  /** Log only. */
  NOT_CONNECTED: 5,
  /** Log only. */
  SELF_CONNECT_NOT_ALLOWED: 6,
} as const;

export type RelayErrorCodeValue = (typeof RelayErrorCode)[keyof typeof RelayErrorCode];

const allocationId = (text: string) => doc(text, bytes(ALLOCATION_ID_LENGTH));

export const BindMsg = message('BIND', {
  acceptMode: doc('always 0 (AUTO)', t.u8),
  nonce: doc('little-endian; the client increments it after every BIND it sends (UTP >= 2.2)', t.u16le),
  connectionDataLength: doc('always 255: UTP zero-pads the connection data', t.u8),
  connectionData: doc(
    "the allocation's connection data, zero-padded to 255 bytes",
    bytes(CONNECTION_DATA_LENGTH),
  ),
  hmac: doc(
    'HMAC-SHA256 keyed with the 64-byte allocation key over bytes 0..263 of this message',
    bytes(HMAC_LENGTH),
  ),
});

export const BindReceivedMsg = message('BIND_RECEIVED', {});

export const PingMsg = message('PING', {
  fromAllocationId: allocationId("the sender's own allocation id"),
  sequenceNumber: doc('little-endian; UTP always sends 1 (bytes 01 00)', t.u16le),
});

export const ConnectRequestMsg = message('CONNECT_REQUEST', {
  allocationId: allocationId("the requester's own allocation id"),
  toConnectionDataLength: doc('always 255', t.u8),
  toConnectionData: doc(
    "the host's connection data, zero-padded to 255 bytes",
    bytes(CONNECTION_DATA_LENGTH),
  ),
});

export const AcceptedMsg = message('ACCEPTED', {
  fromAllocationId: allocationId('the host (target of the request); the client relays to this id'),
  toAllocationId: allocationId('the requester'),
});

export const RejectedMsg = message('REJECTED', {
  fromAllocationId: allocationId('the host that is full (gamewire layout: UTP reads only the header)'),
  toAllocationId: allocationId('the requester'),
});

export const DisconnectMsg = message('DISCONNECT', {
  fromAllocationId: allocationId('the side that disconnects'),
  toAllocationId: allocationId('the peer to notify; the server forwards the message to it unchanged'),
});

export const RelayMsg = message('RELAY', {
  fromAllocationId: allocationId('sender'),
  toAllocationId: allocationId('recipient'),
  data: doc(
    'the opaque UTP packet; its length is a big-endian u16 that must equal the rest of the datagram exactly',
    bytes(t.u16be),
  ),
});

export const CloseMsg = message('CLOSE', {
  allocationId: allocationId('the allocation that unbinds (never sent by UTP; layout from the public doc)'),
});

export const ErrorMsg = message('ERROR', {
  allocationId: allocationId("the receiver's allocation id"),
  errorCode: doc(
    'see RelayErrorCode: 0 version, 1 timeout, 2 unauthorized, 3 address mismatch, 4 not found, 5 not connected, 6 self-connect',
    t.u8,
  ),
});

/** Every message, told apart by the type byte. */
export const RelayMessages = union(t.u8, {
  BIND: [MessageType.BIND, BindMsg],
  BIND_RECEIVED: [MessageType.BIND_RECEIVED, BindReceivedMsg],
  PING: [MessageType.PING, PingMsg],
  CONNECT_REQUEST: [MessageType.CONNECT_REQUEST, ConnectRequestMsg],
  ACCEPTED: [MessageType.ACCEPTED, AcceptedMsg],
  REJECTED: [MessageType.REJECTED, RejectedMsg],
  DISCONNECT: [MessageType.DISCONNECT, DisconnectMsg],
  RELAY: [MessageType.RELAY, RelayMsg],
  CLOSE: [MessageType.CLOSE, CloseMsg],
  ERROR: [MessageType.ERROR, ErrorMsg],
});

/** One datagram: the header's signature and version, then the message chosen by its type. */
export const RelayFrame = struct({
  signature: constant(t.u16be, 0xda72),
  version: constant(t.u8, 0),
  message: RelayMessages,
});

export type RelayMessage = Infer<typeof RelayMessages>;
export type BindMessage = Infer<typeof BindMsg>;
export type RelayDataMessage = Infer<typeof RelayMsg>;

/** `DA 72 00 01`: the whole BIND_RECEIVED. Never mutated; shared by every reply. */
export const BIND_RECEIVED_BYTES: Buffer = Buffer.from([0xda, 0x72, 0x00, 0x01]);

/**
 * The BIND HMAC exactly as `RelayServerData.ComputeBindHMAC` computes it: HMAC-SHA256 with the
 * 64-byte key over the first 263 bytes of the BIND as sent (little-endian nonce, length byte 255,
 * connection data zero-padded to 255).
 */
export function bindHmac(key: Uint8Array, signed: Uint8Array): Buffer {
  return createHmac('sha256', key).update(signed.subarray(0, BIND_SIGNED_LENGTH)).digest();
}

/** Pads connection data to 255 bytes the way `RelayConnectionData.FromByteArray` does. */
export function padConnectionData(data: Uint8Array): Buffer {
  if (data.length > CONNECTION_DATA_LENGTH) {
    throw new EncodeError(
      ErrorCode.TOO_LARGE,
      `connection data is ${data.length} bytes; at most ${CONNECTION_DATA_LENGTH}`,
    );
  }
  const out = Buffer.alloc(CONNECTION_DATA_LENGTH);
  out.set(data);
  return out;
}

/** Encodes one message as a whole datagram (header included). Throws EncodeError. */
export function encodeMessage(m: RelayMessage): Buffer {
  return encode(RelayFrame, { message: m });
}

/** Decodes one whole datagram. Throws DecodeError only (ERR_TRAILING_BYTES if it is longer). */
export function decodeMessage(datagram: Uint8Array): RelayMessage {
  return decode(RelayFrame, datagram).message;
}
