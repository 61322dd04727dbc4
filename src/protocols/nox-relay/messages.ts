/**
 * Every NoxVR Relay v1 message, declared once per direction (docs/nox-relay.md, "Wire format").
 *
 * A packet is `[length u16][uid u16][type u8][payload]`, big-endian, `length` counting the whole
 * packet. The payloads are declared here; `packet.ts` adds the header. Type codes are direction
 * specific (0x11 is Sessions going up, Leave coming down), so there is one union per direction.
 *
 * Trailing optional fields ("present if bytes remain", docs/nox-relay.md) decode to `null` when absent and
 * are written only when not null.
 */
import {
  array,
  bytes,
  type Codec,
  custom,
  type Infer,
  message,
  string,
  struct,
  t,
  union,
  when,
} from '../../wire/index.js';
import {
  AuthResult,
  EnterResult,
  ServerConfigResult,
  TransformType,
  TravelingAction,
  TravelingResult,
} from './constants.js';

/** Nox string: u16 BE byte length, UTF-8 (docs/nox-relay.md). */
export const noxString = string(t.u16be);

/** A trailing string present only when bytes remain; `null` when absent. */
export const optString: Codec<string | null> = custom<string | null>({
  name: 'nox-relay.optional-string',
  description: 'u16 BE length + UTF-8 bytes, present only if bytes remain in the packet (null when absent)',
  read: (r) => (r.remaining === 0 ? null : noxString.read(r)),
  write: (w, v) => {
    if (v !== null && v !== undefined) noxString.write(w, v);
  },
  toJson: (v) => v,
  fromJson: (j, path) => {
    if (j === null) return null;
    return noxString.fromJson(j, path);
  },
});

/** A trailing u16 present only when at least 2 bytes remain (Leave's moderator_id); `null` when absent. */
export const optU16: Codec<number | null> = custom<number | null>({
  name: 'nox-relay.optional-u16',
  description: 'u16 BE, present only if at least 2 bytes remain (null when absent)',
  read: (r) => (r.remaining < 2 ? null : r.u16be()),
  write: (w, v) => {
    if (v !== null && v !== undefined) w.u16be(v);
  },
  toJson: (v) => v,
  fromJson: (j, path) => {
    if (j === null) return null;
    return t.u16be.fromJson(j, path);
  },
});

/**
 * Enter's threshold: a float (reference server and client, docs/nox-relay.md). The documentation's
 * one-byte form is accepted when exactly one byte is left; it is always written as a float.
 */
export const enterThreshold: Codec<number> = custom<number>({
  name: 'nox-relay.enter-threshold',
  description: 'f32 BE (a single trailing byte, the documentation variant, is read as an integer)',
  minSize: 1,
  read: (r) => (r.remaining === 1 ? r.u8() : r.f32be()),
  write: (w, v) => w.f32be(v),
  toJson: (v) => t.f32be.toJson(v),
  fromJson: (j, path) => t.f32be.fromJson(j, path),
});

/** Size of gamewire's UDP address cookie (the optional trailing Handshake field). */
export const ADDRESS_COOKIE_BYTES = 8;

const cookieBytes = bytes(ADDRESS_COOKIE_BYTES);

/**
 * gamewire's UDP address cookie: 8 bytes after the last Handshake field, present only when bytes
 * remain (`null` when absent). The server appends it to a UDP Handshake reply; a client proves it
 * receives at its address by sending it back in a later Handshake. Clients that do not know it
 * read the fields they know and never look further, so the extension costs them nothing.
 */
export const optAddressCookie: Codec<Uint8Array | null> = custom<Uint8Array | null>({
  name: 'nox-relay.address-cookie',
  description: '8 bytes, present only if bytes remain in the packet (null when absent)',
  read: (r) => (r.remaining === 0 ? null : cookieBytes.read(r)),
  write: (w, v) => {
    if (v !== null && v !== undefined) cookieBytes.write(w, v);
  },
  toJson: (v) => (v === null ? null : cookieBytes.toJson(v)),
  fromJson: (j, path) => (j === null ? null : cookieBytes.fromJson(j, path)),
});

/** DateTime: signed 64-bit Unix milliseconds (JSON: a number, or a decimal string beyond 2^53). */
export const dateTime = t.i64be;

export const vector3 = struct({ x: t.f32be, y: t.f32be, z: t.f32be });
export const quaternion = struct({ x: t.f32be, y: t.f32be, z: t.f32be, w: t.f32be });
export type Vector3 = Infer<typeof vector3>;
export type Quaternion = Infer<typeof quaternion>;

/** 4 raw bytes of an IPv4 address (JSON: hex, as every byte array). */
const ipv4 = bytes(4);

// ---- shared layouts -------------------------------------------------------------------------

const disconnectFields = { reason: optString };

const segmentationFields = {
  segmentId: t.u16be,
  totalSegments: t.u16be,
  currentSegment: t.u16be,
  segmentData: bytes('rest'),
};

/** Reliable: u8 count, then u16-length entries, each a complete inner packet (docs/nox-relay.md). */
const reliableFields = { messages: array(bytes(t.u16be), t.u8) };

const quitFields = { instanceId: t.u8, quitType: t.u8, reason: optString };

/**
 * Transform (docs/nox-relay.md). OnPlayer carries player_id and rig; ByPath a path string; OnObject an
 * object id. Each vector is present when its TransformFlags bit is set.
 */
const transformFields = {
  instanceId: t.u8,
  transformType: t.u8,
  path: when((m) => m.transformType === TransformType.ByPath, noxString),
  objectId: when((m) => m.transformType === TransformType.OnObject, t.u16be),
  playerId: when((m) => m.transformType === TransformType.OnPlayer, t.u16be),
  rig: when((m) => m.transformType === TransformType.OnPlayer, t.u16be),
  flags: t.u8,
  position: when((m) => (m.flags & 0x01) !== 0, vector3),
  rotation: when((m) => (m.flags & 0x02) !== 0, quaternion),
  scale: when((m) => (m.flags & 0x04) !== 0, vector3),
  velocity: when((m) => (m.flags & 0x08) !== 0, vector3),
  angularVelocity: when((m) => (m.flags & 0x10) !== 0, vector3),
};

/** gamewire's Teleport (no format exists upstream; docs/nox-relay.md). player_id 0xFFFF = self. */
const teleportFields = { instanceId: t.u8, playerId: t.u16be, position: vector3, rotation: quaternion };

/** One avatar parameter: signed id, u16-length value. */
export const avatarParam = struct({ parameterId: t.i32be, value: bytes(t.u16be) });
const avatarParamsFields = { instanceId: t.u8, playerId: t.u16be, parameters: array(avatarParam, t.u8) };

// ---- client → server ------------------------------------------------------------------------

export const DisconnectRequest = message('Disconnect', disconnectFields);
export const HandshakeRequest = message('Handshake', {
  protocol: t.u16be,
  engine: noxString,
  platform: noxString,
  /** gamewire extension: the cookie of an earlier UDP Handshake reply, proving the address. */
  addressCookie: optAddressCookie,
});
export const SegmentationMsg = message('Segmentation', segmentationFields);
export const ReliableMsg = message('Reliable', reliableFields);
export const LatencyRequest = message('Latency', { timestamp: dateTime });
export const AuthentificationRequest = message('Authentification', { flags: t.u8, accessToken: noxString });
export const EnterRequest = message('Enter', {
  instanceId: t.u8,
  flags: t.u8,
  pseudonyme: when((m) => (m.flags & 0x02) !== 0, noxString),
  password: when((m) => (m.flags & 0x04) !== 0, noxString),
});
export const QuitMsg = message('Quit', quitFields);
/** gamewire's Custom request: `[instance_id][opaque bytes]`, relayed to the other members. */
export const CustomRequest = message('Custom', { instanceId: t.u8, data: bytes('rest') });
/** gamewire's PasswordRequirement request: `[instance_id]` ("does this instance need a password?"). */
export const PasswordRequirementRequest = message('PasswordRequirement', { instanceId: t.u8 });
export const TravelingRequest = message('Traveling', {
  instanceId: t.u8,
  action: t.u8,
  reason: when((m) => m.action === TravelingAction.Failed, optString),
});
export const TransformMsg = message('Transform', transformFields);
export const TeleportMsg = message('Teleport', teleportFields);
export const AvatarChangedRequest = message('AvatarChanged', {
  instanceId: t.u8,
  playerId: t.u16be,
  avatarId: t.u32be,
  avatarServer: noxString,
  avatarVersion: t.u16be,
});
export const ServerConfigRequest = message('ServerConfig', {
  instanceId: t.u8,
  configFlags: t.u8,
  tps: when((m) => (m.configFlags & 0x01) !== 0, t.u8),
  threshold: when((m) => (m.configFlags & 0x02) !== 0, t.f32be),
  capacity: when((m) => (m.configFlags & 0x04) !== 0, t.u16be),
  password: when((m) => (m.configFlags & 0x08) !== 0, noxString),
  instanceFlags: when((m) => (m.configFlags & 0x10) !== 0, t.u32be),
});
export const AvatarParamsMsg = message('AvatarParams', avatarParamsFields);
export const SessionsRequest = message('Sessions', { page: t.u8 });

export const clientMessages = union(t.u8, {
  Disconnect: [0x00, DisconnectRequest],
  Handshake: [0x01, HandshakeRequest],
  Segmentation: [0x02, SegmentationMsg],
  Reliable: [0x03, ReliableMsg],
  Latency: [0x04, LatencyRequest],
  Authentification: [0x05, AuthentificationRequest],
  Enter: [0x06, EnterRequest],
  Quit: [0x07, QuitMsg],
  Custom: [0x08, CustomRequest],
  PasswordRequirement: [0x09, PasswordRequirementRequest],
  Traveling: [0x0a, TravelingRequest],
  Transform: [0x0b, TransformMsg],
  Teleport: [0x0c, TeleportMsg],
  AvatarChanged: [0x0d, AvatarChangedRequest],
  ServerConfig: [0x0e, ServerConfigRequest],
  AvatarParams: [0x0f, AvatarParamsMsg],
  Sessions: [0x11, SessionsRequest],
});
export type ClientMessage = Infer<typeof clientMessages>;

// ---- server → client ------------------------------------------------------------------------

export const DisconnectNotice = message('Disconnect', disconnectFields);
export const HandshakeResponse = message('Handshake', {
  protocol: t.u16be,
  clientId: t.u16be,
  clientIp: ipv4,
  clientPort: t.u16be,
  flags: t.u8,
  /** Present iff IsOffline is clear (docs/nox-relay.md). */
  masterAddr: when((m) => (m.flags & 0x01) === 0, noxString),
  maxPacketSize: t.u16be,
  connectionTimeout: t.u16be,
  keepAliveInterval: t.u16be,
  segmentationTimeout: t.u16be,
  /** gamewire extension, UDP only: the address cookie to send back (docs/nox-relay.md). */
  addressCookie: optAddressCookie,
});
export const LatencyResponse = message('Latency', { clientTimestamp: dateTime, serverTimestamp: dateTime });
export const AuthentificationResponse = message('Authentification', {
  result: t.u8,
  userId: when((m) => m.result === AuthResult.Success, t.u32be),
  serverAddress: when((m) => m.result === AuthResult.Success, noxString),
  displayName: when((m) => m.result === AuthResult.Success, noxString),
  expireAt: when((m) => m.result === AuthResult.Blacklisted, dateTime),
  reason: when((m) => m.result !== AuthResult.Success, optString),
});
const entered = (m: { result: number }) => m.result === EnterResult.Success;
export const EnterResponse = message('Enter', {
  instanceId: t.u8,
  result: t.u8,
  playerFlags: when(entered, t.u32be),
  playerId: when(entered, t.u16be),
  userId: when(entered, t.u32be),
  serverAddress: when(entered, noxString),
  displayName: when(entered, noxString),
  createdAt: when(entered, dateTime),
  tps: when(entered, t.u8),
  /** A float as the reference server and client have it (docs/nox-relay.md). */
  threshold: when(entered, enterThreshold),
  /** Blacklisted: expires_at, then reason (docs/nox-relay.md). */
  expiresAt: when((m) => m.result === EnterResult.Blacklisted, dateTime),
  reason: when((m) => m.result !== EnterResult.Success, optString),
});
/** gamewire's Custom relay: `[instance_id][sender player_id][opaque bytes]`. */
export const CustomNotice = message('Custom', { instanceId: t.u8, playerId: t.u16be, data: bytes('rest') });
/** gamewire's PasswordRequirement reply: `[instance_id][result]` (0 not required, 1 required, 2 not found). */
export const PasswordRequirementResponse = message('PasswordRequirement', { instanceId: t.u8, result: t.u8 });
export const TravelingResponse = message('Traveling', {
  instanceId: t.u8,
  result: t.u8,
  reason: when((m) => (m.result & TravelingResult.Unknown) !== 0, noxString),
  worldMasterId: when((m) => (m.result & TravelingResult.UseMaster) !== 0, t.u32be),
  worldAddress: when((m) => (m.result & TravelingResult.UseMaster) !== 0, noxString),
  worldVersion: when((m) => (m.result & TravelingResult.UseMaster) !== 0, t.u16be),
});
const changing = (m: { result: number }) => m.result === 0;
export const AvatarChangedResponse = message('AvatarChanged', {
  instanceId: t.u8,
  result: t.u8,
  playerId: when(changing, t.u16be),
  avatarId: when(changing, t.u32be),
  avatarServer: when(changing, noxString),
  avatarVersion: when(changing, t.u16be),
  reason: when((m) => m.result !== 0, optString),
});
const configOk = (m: { result: number }) =>
  m.result === ServerConfigResult.Success || m.result === ServerConfigResult.Change;
const configHas = (bit: number) => (m: { result: number; configFlags?: number }) =>
  configOk(m) && ((m.configFlags ?? 0) & bit) !== 0;
/** Reference-server order: instance_flags before has_password (docs/nox-relay.md). */
export const ServerConfigResponse = message('ServerConfig', {
  instanceId: t.u8,
  result: t.u8,
  configFlags: when(configOk, t.u8),
  tps: when(configHas(0x01), t.u8),
  threshold: when(configHas(0x02), t.f32be),
  capacity: when(configHas(0x04), t.u16be),
  instanceFlags: when(configHas(0x10), t.u32be),
  hasPassword: when(configHas(0x08), t.u8),
  reason: when((m) => m.result === ServerConfigResult.Failure, optString),
});
export const JoinNotice = message('Join', {
  instanceId: t.u8,
  playerFlags: t.u32be,
  playerId: t.u16be,
  userId: t.u32be,
  serverAddress: noxString,
  displayName: noxString,
  createdAt: dateTime,
  engine: noxString,
  platform: noxString,
});
/** moderator_id and reason are parsed by remaining length (docs/nox-relay.md). */
export const LeaveNotice = message('Leave', {
  instanceId: t.u8,
  quitType: t.u8,
  playerId: t.u16be,
  moderatorId: optU16,
  reason: optString,
});
export const SessionInstance = struct({
  flags: t.u32be,
  internalId: t.u8,
  masterId: t.u32be,
  currentPlayers: t.u16be,
  capacity: t.u16be,
});
/** Reference-server order: count, instances, then current_page and total_pages (docs/nox-relay.md). */
export const SessionsResponse = message('Sessions', {
  instances: array(SessionInstance, t.u8),
  currentPage: t.u8,
  totalPages: t.u8,
});

export const serverMessages = union(t.u8, {
  Disconnect: [0x00, DisconnectNotice],
  Handshake: [0x01, HandshakeResponse],
  Segmentation: [0x02, SegmentationMsg],
  Reliable: [0x03, ReliableMsg],
  Latency: [0x04, LatencyResponse],
  Authentification: [0x05, AuthentificationResponse],
  Enter: [0x06, EnterResponse],
  Quit: [0x07, QuitMsg],
  Custom: [0x08, CustomNotice],
  PasswordRequirement: [0x09, PasswordRequirementResponse],
  Traveling: [0x0a, TravelingResponse],
  Transform: [0x0b, TransformMsg],
  Teleport: [0x0c, TeleportMsg],
  AvatarChanged: [0x0d, AvatarChangedResponse],
  ServerConfig: [0x0e, ServerConfigResponse],
  AvatarParams: [0x0f, AvatarParamsMsg],
  Join: [0x10, JoinNotice],
  Leave: [0x11, LeaveNotice],
  Sessions: [0x12, SessionsResponse],
});
export type ServerMessage = Infer<typeof serverMessages>;

export type TransformMessage = Infer<typeof TransformMsg>;
