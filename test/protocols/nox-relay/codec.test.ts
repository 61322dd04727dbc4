import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodePackets, encodePackets, noxRelayCodec } from '../../../src/protocols/nox-relay/codec.js';
import { clientMessages, serverMessages } from '../../../src/protocols/nox-relay/messages.js';
import {
  packetMeasure,
  readClientPacket,
  readServerPacket,
  writeClientPacket,
  writeServerPacket,
} from '../../../src/protocols/nox-relay/packet.js';
import { DecodeError, WireReader, WireWriter } from '../../../src/wire/index.js';

/** Hex of a nox string: u16 length + ASCII. */
function s(text: string): string {
  return Buffer.from(text).length.toString(16).padStart(4, '0') + Buffer.from(text).toString('hex');
}

/** A whole packet around a payload. */
function pkt(type: number, payload: string, uid = 0): Buffer {
  const body = Buffer.from(payload.replace(/\s+/g, ''), 'hex');
  const b = Buffer.alloc(5 + body.length);
  b.writeUInt16BE(b.length, 0);
  b.writeUInt16BE(uid, 2);
  b[4] = type;
  body.copy(b, 5);
  return b;
}

type Fixture = [
  name: string,
  from: 'client' | 'server',
  type: number,
  payload: string,
  expected: Record<string, unknown>,
];

const TS = '0000018a321f8000'; // 1693058039808 ms
const fixtures: Fixture[] = [
  [
    'handshake_request_unity_windows',
    'client',
    0x01,
    '0001 0005756e697479 000777696e646f7773',
    { type: 'Handshake', protocol: 1, engine: 'unity', platform: 'windows', addressCookie: null },
  ],
  [
    'handshake_request_with_address_cookie (gamewire extension)',
    'client',
    0x01,
    '0001 0005756e697479 000777696e646f7773 0102030405060708',
    { type: 'Handshake', engine: 'unity', addressCookie: '0102030405060708' },
  ],
  [
    'handshake_response_online',
    'server',
    0x01,
    `0001 0042 c0a80110 9c40 00 ${s('master.nox')} 0400 000f 0005 001e`,
    {
      type: 'Handshake',
      clientId: 66,
      clientIp: 'c0a80110',
      clientPort: 40000,
      flags: 0,
      masterAddr: 'master.nox',
      maxPacketSize: 1024,
      connectionTimeout: 15,
      keepAliveInterval: 5,
      segmentationTimeout: 30,
      addressCookie: null,
    },
  ],
  [
    'handshake_response_offline_with_address_cookie (gamewire extension)',
    'server',
    0x01,
    '0001 0000 7f000001 1234 01 0400 000f 0005 001e a1a2a3a4a5a6a7a8',
    { flags: 1, addressCookie: 'a1a2a3a4a5a6a7a8' },
  ],
  [
    'handshake_response_offline',
    'server',
    0x01,
    '0001 0000 7f000001 1234 01 0400 000f 0005 001e',
    { flags: 1, clientPort: 0x1234 },
  ],
  [
    'disconnect_request_user_logout',
    'client',
    0x00,
    '000b 55736572206c6f676f7574',
    { type: 'Disconnect', reason: 'User logout' },
  ],
  ['disconnect_request_empty', 'client', 0x00, '', { type: 'Disconnect', reason: null }],
  ['disconnect_goodbye', 'server', 0x00, '0007 476f6f64627965', { type: 'Disconnect', reason: 'Goodbye' }],
  ['latency_request', 'client', 0x04, '0000 0191 fb3e 3a83', { type: 'Latency', timestamp: 1726497045123 }],
  [
    'latency_response',
    'server',
    0x04,
    '00000191fb3e3a83 00000191fb3e3aa4',
    { clientTimestamp: 1726497045123, serverTimestamp: 1726497045156 },
  ],
  [
    'authentification_request',
    'client',
    0x05,
    `00 ${s('eyJhbGciOiJIUzI1NiIs')}`,
    { flags: 0, accessToken: 'eyJhbGciOiJIUzI1NiIs' },
  ],
  [
    'authentification_response_success',
    'server',
    0x05,
    `00 0000042a ${s('nox.server')} ${s('PlayerName123')}`,
    { result: 0, userId: 1066, serverAddress: 'nox.server', displayName: 'PlayerName123' },
  ],
  ['authentification_response_invalid', 'server', 0x05, '01', { result: 1, reason: null }],
  [
    'authentification_response_blacklisted',
    'server',
    0x05,
    `03 ${TS} ${s('Cheating detected')}`,
    { result: 3, expireAt: 1693058039808, reason: 'Cheating detected' },
  ],
  [
    'authentification_response_master_error',
    'server',
    0x05,
    `02 ${s('Database unavailable')}`,
    { result: 2, reason: 'Database unavailable' },
  ],
  ['enter_request_standard', 'client', 0x06, '05 00', { type: 'Enter', instanceId: 5, flags: 0 }],
  [
    'enter_request_pseudonyme_and_password',
    'client',
    0x06,
    `03 06 ${s('PlayerName')} ${s('secret123')}`,
    { instanceId: 3, flags: 6, pseudonyme: 'PlayerName', password: 'secret123' },
  ],
  ['enter_request_bot', 'client', 0x06, '01 09', { instanceId: 1, flags: 9 }],
  [
    'enter_response_success_float',
    'server',
    0x06,
    `05 00 00000000 0001 0000042a ${s('nox.server')} ${s('PlayerName123')} ${TS} 3c 42480000`,
    {
      instanceId: 5,
      result: 0,
      playerFlags: 0,
      playerId: 1,
      userId: 1066,
      displayName: 'PlayerName123',
      createdAt: 1693058039808,
      tps: 60,
      threshold: 50,
    },
  ],
  [
    'enter_response_full',
    'server',
    0x06,
    `05 02 ${s('Instance is full')}`,
    { result: 2, reason: 'Instance is full' },
  ],
  [
    'enter_response_blacklisted',
    'server',
    0x06,
    `05 03 ${TS} ${s('Disruptive behavior')}`,
    { result: 3, expiresAt: 1693058039808, reason: 'Disruptive behavior' },
  ],
  [
    'enter_response_incorrect_password',
    'server',
    0x06,
    `05 06 ${s('Incorrect password')}`,
    { result: 6, reason: 'Incorrect password' },
  ],
  ['quit_request', 'client', 0x07, '05 00', { type: 'Quit', instanceId: 5, quitType: 0, reason: null }],
  ['quit_request_reason', 'client', 0x07, `03 00 ${s('Going to sleep')}`, { reason: 'Going to sleep' }],
  [
    'quit_response_error',
    'server',
    0x07,
    `05 05 ${s('Instance not found')}`,
    { quitType: 5, reason: 'Instance not found' },
  ],
  [
    'join_notification_normal_player',
    'server',
    0x10,
    `05 00000000 0004 0000042a ${s('nox.server')} ${s('PlayerName123')} ${TS} ${s('unity')} ${s('windows')}`,
    {
      type: 'Join',
      instanceId: 5,
      playerId: 4,
      userId: 1066,
      displayName: 'PlayerName123',
      engine: 'unity',
      platform: 'windows',
    },
  ],
  [
    'join_notification_bot',
    'server',
    0x10,
    '02 00 00 02 01 00 08 00 00 00 00 00 0A 62 6F 74 2E 73 65 72 76 65 72 00 07 42 6F 74 4E 61 6D 65 00 00 01 8A 32 1F 80 00 00 04 6E 6F 64 65 00 05 6C 69 6E 75 78',
    { playerFlags: 0x201, playerId: 8, displayName: 'BotName', engine: 'node', platform: 'linux' },
  ],
  [
    'join_notification_moderator',
    'server',
    0x10,
    `01 00000004 0001 00000539 ${s('nox.server')} ${s('ModeratorX')} ${TS} ${s('unreal')} ${s('windows')}`,
    { userId: 1337, displayName: 'ModeratorX' },
  ],
  [
    'leave_normal',
    'server',
    0x11,
    '05 00 00 03',
    { type: 'Leave', instanceId: 5, quitType: 0, playerId: 3, moderatorId: null, reason: null },
  ],
  [
    'leave_notification_moderation_kick',
    'server',
    0x11,
    `05 02 0003 0001 ${s('Toxic behavior')}`,
    { quitType: 2, playerId: 3, moderatorId: 1, reason: 'Toxic behavior' },
  ],
  [
    'leave_vote_kick',
    'server',
    0x11,
    '01 03 00 05 FF FF 00 0B 56 6F 74 65 20 70 61 73 73 65 64',
    { quitType: 3, moderatorId: 0xffff, reason: 'Vote passed' },
  ],
  ['server_config_query', 'client', 0x0e, '05 00', { type: 'ServerConfig', instanceId: 5, configFlags: 0 }],
  ['server_config_set_tps', 'client', 0x0e, '05 01 3c', { configFlags: 1, tps: 60 }],
  [
    'server_config_request_performance',
    'client',
    0x0e,
    '03 03 1e 42480000',
    { configFlags: 3, tps: 30, threshold: 50 },
  ],
  [
    'server_config_security',
    'client',
    0x0e,
    '01 18 00 09 73 65 63 72 65 74 31 32 33 00 00 00 07',
    { configFlags: 0x18, password: 'secret123', instanceFlags: 7 },
  ],
  ['server_config_response_success', 'server', 0x0e, '05 00 01 3c', { result: 0, configFlags: 1, tps: 60 }],
  [
    'server_config_response_full_server_order',
    'server',
    0x0e,
    '03 02 1f 3c 42480000 0020 00000003 01',
    { result: 2, configFlags: 0x1f, tps: 60, threshold: 50, capacity: 32, instanceFlags: 3, hasPassword: 1 },
  ],
  [
    'server_config_response_failure',
    'server',
    0x0e,
    `05 01 ${s('Permission denied')}`,
    { result: 1, reason: 'Permission denied' },
  ],
  ['sessions_request', 'client', 0x11, '02', { type: 'Sessions', page: 2 }],
  [
    'sessions_response_two_instances_server_order',
    'server',
    0x12,
    '02 00000001 05 0000042a 0008 0020 00000003 03 00000539 0004 0010 00 01',
    {
      type: 'Sessions',
      instances: [
        { flags: 1, internalId: 5, masterId: 1066, currentPlayers: 8, capacity: 32 },
        { flags: 3, internalId: 3, masterId: 1337, currentPlayers: 4, capacity: 16 },
      ],
      currentPage: 0,
      totalPages: 1,
    },
  ],
  ['sessions_response_empty', 'server', 0x12, '00 00 00', { instances: [], currentPage: 0, totalPages: 0 }],
  [
    'reliable_two_messages',
    'client',
    0x03,
    '02 0008 0401020304050607 0004 01aabbcc',
    { type: 'Reliable', messages: ['0401020304050607', '01aabbcc'] },
  ],
  [
    'segmentation_first',
    'client',
    0x02,
    '002a 0003 0000 deadbeef',
    { segmentId: 42, totalSegments: 3, currentSegment: 0, segmentData: 'deadbeef' },
  ],
  ['traveling_travel', 'client', 0x0a, '05 00', { type: 'Traveling', instanceId: 5, action: 0 }],
  ['traveling_failed', 'client', 0x0a, `05 02 ${s('no world')}`, { action: 2, reason: 'no world' }],
  [
    'traveling_response_use_master',
    'server',
    0x0a,
    `05 04 00000063 ${s('nox.server')} 0003`,
    { result: 4, worldMasterId: 99, worldAddress: 'nox.server', worldVersion: 3 },
  ],
  ['traveling_response_ready', 'server', 0x0a, '05 10', { result: 0x10 }],
  [
    'traveling_response_unknown',
    'server',
    0x0a,
    `05 08 ${s('Player is not traveling')}`,
    { result: 8, reason: 'Player is not traveling' },
  ],
  [
    'transform_request_self_head',
    'client',
    0x0b,
    '05 01 FF FF 00 05 03 3F 80 00 00 3F D9 99 9A C0 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 3F 80 00 00',
    {
      type: 'Transform',
      instanceId: 5,
      transformType: 1,
      playerId: 0xffff,
      rig: 5,
      flags: 3,
      rotation: { x: 0, y: 0, z: 0, w: 1 },
    },
  ],
  [
    'transform_relay',
    'server',
    0x0b,
    '05 01 00 04 00 05 01 3F800000 3FD9999A C0000000',
    { playerId: 4, flags: 1 },
  ],
  [
    'transform_by_path',
    'client',
    0x0b,
    `05 00 ${s('Root/Cube')} 04 3f800000 3f800000 3f800000`,
    { transformType: 0, path: 'Root/Cube', scale: { x: 1, y: 1, z: 1 } },
  ],
  [
    'avatar_changed_request',
    'client',
    0x0d,
    `05 FFFF 000004D2 ${s('nox.server')} 0001`,
    { type: 'AvatarChanged', playerId: 0xffff, avatarId: 1234, avatarServer: 'nox.server', avatarVersion: 1 },
  ],
  ['avatar_changed_reply', 'server', 0x0d, '05 03', { result: 3, reason: null }],
  [
    'avatar_changed_broadcast',
    'server',
    0x0d,
    `05 00 0004 000004D2 ${s('nox.server')} 0001`,
    { result: 0, playerId: 4, avatarId: 1234 },
  ],
  [
    'avatar_params',
    'client',
    0x0f,
    '05 FF FF 01 00 00 00 07 00 04 3F 00 00 00',
    { type: 'AvatarParams', parameters: [{ parameterId: 7, value: '3f000000' }] },
  ],
  ['custom_request', 'client', 0x08, '05 68656c6c6f', { type: 'Custom', instanceId: 5, data: '68656c6c6f' }],
  ['custom_relay', 'server', 0x08, '05 0002 68656c6c6f', { type: 'Custom', playerId: 2, data: '68656c6c6f' }],
  ['password_requirement_request', 'client', 0x09, '05', { type: 'PasswordRequirement', instanceId: 5 }],
  ['password_requirement_response', 'server', 0x09, '05 01', { result: 1 }],
  [
    'teleport',
    'client',
    0x0c,
    'fe ffff 3f800000 00000000 00000000 00000000 00000000 00000000 3f800000',
    { type: 'Teleport', instanceId: 0xfe, playerId: 0xffff, position: { x: 1, y: 0, z: 0 } },
  ],
];

describe('nox-relay codec: spec fixtures (corrected u16 string lengths)', () => {
  for (const [name, from, type, payload, expected] of fixtures) {
    it(`${name} decodes and re-encodes byte for byte`, () => {
      const bytes = pkt(type, payload, 0x1234);
      const json = noxRelayCodec.decode(bytes, { from }) as Record<string, unknown>;
      expect(json).toMatchObject({ uid: 0x1234, ...expected });
      const back = noxRelayCodec.encode(JSON.parse(JSON.stringify(json)), { from });
      expect(back.toString('hex')).toBe(bytes.toString('hex'));
    });
  }

  it('0x11 is Sessions going up and Leave coming down', () => {
    expect(noxRelayCodec.decode(pkt(0x11, '02'), { from: 'client' })).toMatchObject({
      type: 'Sessions',
      page: 2,
    });
    expect(noxRelayCodec.decode(pkt(0x11, '05 00 0003'), { from: 'server' })).toMatchObject({
      type: 'Leave',
      playerId: 3,
    });
  });

  it("accepts the documentation's one-byte Enter threshold and writes the float form", () => {
    const doc = pkt(
      0x06,
      `05 00 00000000 0001 0000042a ${s('nox.server')} ${s('PlayerName123')} ${TS} 3c 32`,
    );
    expect(doc.length).toBe(5 + 49);
    const json = noxRelayCodec.decode(doc, { from: 'server' });
    expect(json).toMatchObject({ tps: 60, threshold: 50 });
    expect(noxRelayCodec.encode(json, { from: 'server' }).subarray(-4).toString('hex')).toBe('42480000');
  });

  it('several packets in one buffer decode to an array, in order', () => {
    const both = Buffer.concat([pkt(0x04, '0000000000000001', 1), pkt(0x11, '00', 2)]);
    const out = decodePackets(both, { from: 'client' });
    expect(out).toMatchObject([
      { type: 'Latency', uid: 1 },
      { type: 'Sessions', uid: 2 },
    ]);
    expect(encodePackets(out, { from: 'client' }).equals(both)).toBe(true);
  });

  it('rejects short, long, truncated and unknown input with DecodeError codes', () => {
    const codeOf = (hex: string, from: 'client' | 'server' = 'client') => {
      try {
        noxRelayCodec.decode(Buffer.from(hex, 'hex'), { from });
      } catch (e) {
        expect(e).toBeInstanceOf(DecodeError);
        return (e as DecodeError).code;
      }
      return 'none';
    };
    expect(codeOf('000300')).toBe('ERR_BAD_LENGTH');
    expect(codeOf('0006000004')).toBe('ERR_INCOMPLETE');
    expect(codeOf('')).toBe('ERR_INCOMPLETE');
    expect(codeOf('0005000010')).toBe('ERR_UNKNOWN_TYPE'); // 0x10 (Join) never goes up
    expect(codeOf('0005000012', 'server')).toBe('ERR_INCOMPLETE'); // Sessions response lacks its body
    expect(codeOf('0008000011000102')).toBe('ERR_TRAILING_BYTES');
    expect(codeOf('00090000010001000a')).toBe('ERR_INCOMPLETE'); // string runs past the packet
  });

  it('the frame measure refuses lengths under 5 and over the max', () => {
    const m = packetMeasure(1024);
    expect(() => m(Buffer.from('0003000000', 'hex'), 0, 5)).toThrow(/minimum/);
    expect(() => m(Buffer.from('0401000000', 'hex'), 0, 5)).toThrow(/exceeds/);
    expect(m(Buffer.from('0400', 'hex'), 0, 2)).toBe(1024);
    expect(m(Buffer.from('04', 'hex'), 0, 1)).toBe(-1);
  });
});

// ---- properties ----------------------------------------------------------------------------

const f32 = fc.float({ noNaN: true }).map((x) => Math.fround(x));
const vec = fc.record({ x: f32, y: f32, z: f32 });
const quat = fc.record({ x: f32, y: f32, z: f32, w: f32 });
const u8 = fc.integer({ min: 0, max: 255 });
const u16 = fc.integer({ min: 0, max: 0xffff });
const u32 = fc.integer({ min: 0, max: 0xffffffff });
const str = fc.string({ maxLength: 40, unit: 'grapheme' });
const ts = fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n });
const blob = fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b));
const optStr = fc.option(str, { nil: null });

const transform = fc
  .record({
    instanceId: u8,
    transformType: fc.integer({ min: 0, max: 3 }),
    flags: fc.integer({ min: 0, max: 0x3f }),
    a: str,
    b: u16,
    c: u16,
  })
  .chain((m) =>
    fc.record({ position: vec, rotation: quat, scale: vec, velocity: vec, angularVelocity: vec }).map((v) => {
      const out: Record<string, unknown> = {
        type: 'Transform',
        instanceId: m.instanceId,
        transformType: m.transformType,
      };
      if (m.transformType === 0) out.path = m.a;
      if (m.transformType === 2) out.objectId = m.b;
      if (m.transformType === 1) Object.assign(out, { playerId: m.b, rig: m.c });
      out.flags = m.flags;
      if (m.flags & 1) out.position = v.position;
      if (m.flags & 2) out.rotation = v.rotation;
      if (m.flags & 4) out.scale = v.scale;
      if (m.flags & 8) out.velocity = v.velocity;
      if (m.flags & 16) out.angularVelocity = v.angularVelocity;
      return out;
    }),
  );

const cookieArb = fc.uint8Array({ minLength: 8, maxLength: 8 }).map((b) => Buffer.from(b));

const clientArb = fc.oneof(
  optStr.map((reason) => ({ type: 'Disconnect', reason })),
  fc
    .record({ protocol: u16, engine: str, platform: str, addressCookie: fc.option(cookieArb) })
    .map((m) => ({ type: 'Handshake', ...m })),
  fc
    .record({ segmentId: u16, totalSegments: u16, currentSegment: u16, segmentData: blob })
    .map((m) => ({ type: 'Segmentation', ...m })),
  fc.array(blob, { maxLength: 5 }).map((messages) => ({ type: 'Reliable', messages })),
  ts.map((timestamp) => ({ type: 'Latency', timestamp })),
  fc.record({ flags: u8, accessToken: str }).map((m) => ({ type: 'Authentification', ...m })),
  fc
    .record({ instanceId: u8, flags: fc.integer({ min: 0, max: 15 }), p: str, q: str })
    .map(({ p, q, ...m }) => ({
      type: 'Enter',
      ...m,
      ...(m.flags & 2 ? { pseudonyme: p } : {}),
      ...(m.flags & 4 ? { password: q } : {}),
    })),
  fc.record({ instanceId: u8, quitType: u8, reason: optStr }).map((m) => ({ type: 'Quit', ...m })),
  fc.record({ instanceId: u8, data: blob }).map((m) => ({ type: 'Custom', ...m })),
  u8.map((instanceId) => ({ type: 'PasswordRequirement', instanceId })),
  fc
    .record({ instanceId: u8, action: fc.integer({ min: 0, max: 3 }), reason: optStr })
    .map(({ reason, ...m }) => ({
      type: 'Traveling',
      ...m,
      ...(m.action === 2 ? { reason } : {}),
    })),
  transform,
  fc
    .record({ instanceId: u8, playerId: u16, position: vec, rotation: quat })
    .map((m) => ({ type: 'Teleport', ...m })),
  fc
    .record({ instanceId: u8, playerId: u16, avatarId: u32, avatarServer: str, avatarVersion: u16 })
    .map((m) => ({ type: 'AvatarChanged', ...m })),
  fc
    .record({
      instanceId: u8,
      configFlags: fc.integer({ min: 0, max: 0x1f }),
      tps: u8,
      threshold: f32,
      capacity: u16,
      password: str,
      instanceFlags: u32,
    })
    .map((m) => {
      const out: Record<string, unknown> = {
        type: 'ServerConfig',
        instanceId: m.instanceId,
        configFlags: m.configFlags,
      };
      if (m.configFlags & 1) out.tps = m.tps;
      if (m.configFlags & 2) out.threshold = m.threshold;
      if (m.configFlags & 4) out.capacity = m.capacity;
      if (m.configFlags & 8) out.password = m.password;
      if (m.configFlags & 16) out.instanceFlags = m.instanceFlags;
      return out;
    }),
  fc
    .record({
      instanceId: u8,
      playerId: u16,
      parameters: fc.array(
        fc.record({ parameterId: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), value: blob }),
        { maxLength: 4 },
      ),
    })
    .map((m) => ({ type: 'AvatarParams', ...m })),
  u8.map((page) => ({ type: 'Sessions', page })),
);

const serverArb = fc.oneof(
  optStr.map((reason) => ({ type: 'Disconnect', reason })),
  fc
    .record({
      protocol: u16,
      clientId: u16,
      clientIp: fc.uint8Array({ minLength: 4, maxLength: 4 }).map((b) => Buffer.from(b)),
      clientPort: u16,
      flags: u8,
      m: str,
      a: u16,
      b: u16,
      c: u16,
      d: u16,
      addressCookie: fc.option(cookieArb),
    })
    .map(({ m, a, b, c, d, addressCookie, ...x }) => ({
      type: 'Handshake',
      ...x,
      ...(x.flags & 1 ? {} : { masterAddr: m }),
      maxPacketSize: a,
      connectionTimeout: b,
      keepAliveInterval: c,
      segmentationTimeout: d,
      addressCookie,
    })),
  fc.record({ clientTimestamp: ts, serverTimestamp: ts }).map((m) => ({ type: 'Latency', ...m })),
  fc
    .record({
      result: fc.integer({ min: 0, max: 5 }),
      userId: u32,
      a: str,
      b: str,
      expireAt: ts,
      reason: optStr,
    })
    .map((m) =>
      m.result === 0
        ? { type: 'Authentification', result: 0, userId: m.userId, serverAddress: m.a, displayName: m.b }
        : {
            type: 'Authentification',
            result: m.result,
            ...(m.result === 3 ? { expireAt: m.expireAt } : {}),
            reason: m.reason,
          },
    ),
  fc
    .record({
      instanceId: u8,
      result: fc.integer({ min: 0, max: 9 }),
      playerFlags: u32,
      playerId: u16,
      userId: u32,
      a: str,
      b: str,
      createdAt: ts,
      tps: u8,
      threshold: f32,
      reason: optStr,
    })
    .map(({ a, b, ...m }) =>
      m.result === 0
        ? {
            type: 'Enter',
            instanceId: m.instanceId,
            result: 0,
            playerFlags: m.playerFlags,
            playerId: m.playerId,
            userId: m.userId,
            serverAddress: a,
            displayName: b,
            createdAt: m.createdAt,
            tps: m.tps,
            threshold: m.threshold,
          }
        : {
            type: 'Enter',
            instanceId: m.instanceId,
            result: m.result,
            ...(m.result === 3 ? { expiresAt: m.createdAt } : {}),
            reason: m.reason,
          },
    ),
  fc.record({ instanceId: u8, quitType: u8, reason: optStr }).map((m) => ({ type: 'Quit', ...m })),
  fc.record({ instanceId: u8, playerId: u16, data: blob }).map((m) => ({ type: 'Custom', ...m })),
  fc.record({ instanceId: u8, result: u8 }).map((m) => ({ type: 'PasswordRequirement', ...m })),
  fc
    .record({
      instanceId: u8,
      result: fc.constantFrom(0, 4, 8, 0x10, 12),
      reason: str,
      worldMasterId: u32,
      worldAddress: str,
      worldVersion: u16,
    })
    .map((m) => ({
      type: 'Traveling',
      instanceId: m.instanceId,
      result: m.result,
      ...(m.result & 8 ? { reason: m.reason } : {}),
      ...(m.result & 4
        ? { worldMasterId: m.worldMasterId, worldAddress: m.worldAddress, worldVersion: m.worldVersion }
        : {}),
    })),
  transform,
  fc
    .record({
      instanceId: u8,
      result: fc.integer({ min: 0, max: 3 }),
      playerId: u16,
      avatarId: u32,
      avatarServer: str,
      avatarVersion: u16,
      reason: optStr,
    })
    .map((m) =>
      m.result === 0
        ? {
            type: 'AvatarChanged',
            instanceId: m.instanceId,
            result: 0,
            playerId: m.playerId,
            avatarId: m.avatarId,
            avatarServer: m.avatarServer,
            avatarVersion: m.avatarVersion,
          }
        : { type: 'AvatarChanged', instanceId: m.instanceId, result: m.result, reason: m.reason },
    ),
  fc
    .record({
      instanceId: u8,
      result: fc.integer({ min: 0, max: 2 }),
      configFlags: fc.integer({ min: 0, max: 0x1f }),
      tps: u8,
      threshold: f32,
      capacity: u16,
      instanceFlags: u32,
      hasPassword: u8,
      reason: optStr,
    })
    .map((m) => {
      const out: Record<string, unknown> = {
        type: 'ServerConfig',
        instanceId: m.instanceId,
        result: m.result,
      };
      if (m.result === 1) return { ...out, reason: m.reason };
      out.configFlags = m.configFlags;
      if (m.configFlags & 1) out.tps = m.tps;
      if (m.configFlags & 2) out.threshold = m.threshold;
      if (m.configFlags & 4) out.capacity = m.capacity;
      if (m.configFlags & 16) out.instanceFlags = m.instanceFlags;
      if (m.configFlags & 8) out.hasPassword = m.hasPassword;
      return out;
    }),
  fc
    .record({
      instanceId: u8,
      playerFlags: u32,
      playerId: u16,
      userId: u32,
      serverAddress: str,
      displayName: str,
      createdAt: ts,
      engine: str,
      platform: str,
    })
    .map((m) => ({ type: 'Join', ...m })),
  fc
    .record({
      instanceId: u8,
      quitType: u8,
      playerId: u16,
      moderatorId: fc.option(u16, { nil: null }),
      reason: optStr,
    })
    .map((m) => ({
      type: 'Leave',
      ...m,
      reason: m.moderatorId === null ? null : m.reason,
    })),
  fc
    .record({
      instances: fc.array(
        fc.record({ flags: u32, internalId: u8, masterId: u32, currentPlayers: u16, capacity: u16 }),
        { maxLength: 5 },
      ),
      currentPage: u8,
      totalPages: u8,
    })
    .map((m) => ({ type: 'Sessions', ...m })),
);

function roundTrip(from: 'client' | 'server', msg: Record<string, unknown>, uid: number): void {
  const w = new WireWriter();
  if (from === 'client') writeClientPacket(w, uid, msg as never);
  else writeServerPacket(w, uid, msg as never);
  const bytes = w.toBuffer();
  const r = new WireReader(bytes);
  const back = from === 'client' ? readClientPacket(r) : readServerPacket(r);
  expect(back.uid).toBe(uid);
  // Compare through the JSON form (Buffers, bigints and -0 normalised the same way).
  const union = from === 'client' ? clientMessages : serverMessages;
  expect(union.toJson(back.message as never)).toEqual(union.toJson(msg as never));
  // And the CLI JSON round trip gives the same bytes.
  const json = JSON.parse(JSON.stringify(noxRelayCodec.decode(bytes, { from })));
  expect(noxRelayCodec.encode(json, { from }).equals(bytes)).toBe(true);
}

describe('nox-relay codec: properties', () => {
  it('every client message round-trips', () => {
    fc.assert(
      fc.property(clientArb, u16, (m, uid) => roundTrip('client', m as never, uid)),
      { numRuns: 400 },
    );
  });

  it('every server message round-trips', () => {
    fc.assert(
      fc.property(serverArb, u16, (m, uid) => roundTrip('server', m as never, uid)),
      { numRuns: 400 },
    );
  });

  it('arbitrary bytes give a value or a DecodeError, nothing else, both directions', () => {
    const typed = fc
      .tuple(fc.integer({ min: 0, max: 0x13 }), fc.uint8Array({ maxLength: 60 }))
      .map(([type, body]) => {
        const b = Buffer.alloc(5 + body.length);
        b.writeUInt16BE(b.length, 0);
        b[4] = type;
        b.set(body, 5);
        return b;
      });
    const anyBytes = fc.oneof(
      fc.uint8Array({ maxLength: 80 }).map((b) => Buffer.from(b)),
      typed,
    );
    fc.assert(
      fc.property(anyBytes, fc.constantFrom('client' as const, 'server' as const), (bytes, from) => {
        try {
          noxRelayCodec.decode(bytes, { from });
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
          expect((e as DecodeError).code).not.toBe('ERR_INTERNAL');
        }
      }),
      { numRuns: 3000 },
    );
  });
});
