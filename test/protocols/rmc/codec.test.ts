import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  anyDataHolder,
  decodeStream,
  hyperscapePacket,
  qString,
  rmcCodec,
} from '../../../src/protocols/rmc/index.js';
import { DecodeError, decode, encode, struct } from '../../../src/wire/index.js';
import {
  hexDumpsFromSeed,
  SEED_ERROR_RESPONSE_HEX,
  SEED_REGISTER_REQUEST_HEX,
  SEED_URLS,
  seedError,
  seedRequest,
} from './fixtures.js';

function decodeError(fn: () => unknown): DecodeError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(DecodeError);
    return e as DecodeError;
  }
  throw new Error('expected a DecodeError');
}

describe('seed document', () => {
  // The seed documents are not part of this repository: RMC_SEED_DIR names their folder when a
  // copy is at hand, so the fixtures can be checked against the dumps printed there.
  const seedDir = process.env.RMC_SEED_DIR;
  it('the fixtures are the dumps printed in the seed document', () => {
    const file =
      seedDir !== undefined && existsSync(seedDir)
        ? readdirSync(seedDir).find((f) => f.startsWith('000_'))
        : undefined;
    if (seedDir === undefined || file === undefined) {
      // Without the seed documents, at least check the fixtures' own lengths (spec §1.7).
      expect(seedRequest().length).toBe(253);
      expect(seedError().length).toBe(41);
      return;
    }
    const dumps = hexDumpsFromSeed(readFileSync(path.join(seedDir, file), 'utf8'));
    expect(dumps).toContain(SEED_REGISTER_REQUEST_HEX);
    expect(dumps).toContain(SEED_ERROR_RESPONSE_HEX);
  });
});

describe('rmc codec: the seed Register_V1 request', () => {
  it('decodes all 253 bytes into a typed request', () => {
    const bytes = seedRequest();
    expect(bytes.length).toBe(253);
    expect(rmcCodec.decode(bytes, {})).toEqual({
      type: 'request',
      protocol: 'LoginProtocol',
      callId: 6,
      method: 'LoginProtocol::Register_V1',
      classVersions: [],
      args: { vecMyURLs: SEED_URLS },
    });
  });

  it('re-encodes byte-exactly from the typed JSON and from the hex form', () => {
    const json = rmcCodec.decode(seedRequest(), {});
    expect(rmcCodec.encode(json, {}).toString('hex')).toBe(SEED_REGISTER_REQUEST_HEX);
    const raw = decode(hyperscapePacket, seedRequest());
    const hexJson = hyperscapePacket.toJson(raw);
    expect(typeof (hexJson as { args: unknown }).args).toBe('string');
    expect(rmcCodec.encode(hexJson, {}).toString('hex')).toBe(SEED_REGISTER_REQUEST_HEX);
    expect(encode(hyperscapePacket, raw).toString('hex')).toBe(SEED_REGISTER_REQUEST_HEX);
  });

  it('every proper prefix is incomplete, never a message', () => {
    const bytes = seedRequest();
    for (let n = 1; n < bytes.length; n++) {
      const e = decodeError(() => rmcCodec.decode(bytes.subarray(0, n), {}));
      expect(e.code).toBe('ERR_INCOMPLETE');
    }
  });
});

describe('rmc codec: the seed failure response', () => {
  it('decodes into namespace, code and call id', () => {
    expect(rmcCodec.decode(seedError(), {})).toEqual({
      type: 'error',
      protocol: 'LoginProtocol',
      namespace: 'RendezVous',
      code: 0x81,
      callId: 5,
    });
  });

  it('re-encodes byte-exactly', () => {
    expect(rmcCodec.encode(rmcCodec.decode(seedError(), {}), {}).toString('hex')).toBe(
      SEED_ERROR_RESPONSE_HEX,
    );
  });

  it('a stream of both decodes into an array, in order, and re-encodes', () => {
    const both = Buffer.concat([seedError(), seedRequest()]);
    const json = rmcCodec.decode(both, {}) as { type: string }[];
    expect(json.map((j) => j.type)).toEqual(['error', 'request']);
    expect(rmcCodec.encode(json, {}).equals(both)).toBe(true);
  });

  it('the classic reading of the same bytes differs (variant matters)', () => {
    // Byte 4 (0x0e) read as a packed protocol id: a response for protocol 14, then garbage.
    expect(() => rmcCodec.decode(seedError(), { variant: 'classic' })).toThrow(DecodeError);
  });
});

describe('rmc codec: success responses', () => {
  it('a Register_V1 response decodes its results by the declared signature', () => {
    const json = {
      type: 'response',
      protocol: 'LoginProtocol',
      callId: 6,
      method: 'LoginProtocol::Register_V1*',
      results: { retval: 0x00010001, pidConnectionID: 7, urlPublic: 'prudp:/address=1.2.3.4;port=9103' },
    };
    const bytes = rmcCodec.encode(json, {});
    expect(rmcCodec.decode(bytes, {})).toEqual(json);
    // Layout: length, String, isRequest=0, success=1, callId, String method*, results.
    expect(bytes.readUInt32LE(0)).toBe(bytes.length - 4);
    expect(bytes[20]).toBe(0);
    expect(bytes[21]).toBe(1);
    expect(bytes.readUInt32LE(22)).toBe(6);
  });

  it('an undeclared method keeps its results as hex', () => {
    const json = {
      type: 'response',
      protocol: 'XProtocol',
      callId: 1,
      method: 'XProtocol::Y_V1*',
      results: '0102',
    };
    expect(rmcCodec.decode(rmcCodec.encode(json, {}), {})).toEqual(json);
  });

  it('arguments that do not fit the declaration fall back to hex (still byte-exact)', () => {
    const json = {
      type: 'request',
      protocol: 'LoginProtocol',
      callId: 1,
      method: 'LoginProtocol::Register_V1',
      classVersions: [],
      args: 'ff',
    };
    const bytes = rmcCodec.encode(json, {});
    expect(rmcCodec.decode(bytes, {})).toEqual(json);
  });

  it('class versions survive', () => {
    const json = {
      type: 'request',
      protocol: 'P',
      callId: 9,
      method: 'P::M_V1',
      classVersions: [{ name: 'ClientVersionInfo', version: 1 }],
      args: '',
    };
    const bytes = rmcCodec.encode(json, {});
    // The wiki's ClassVersion example: 12 00 "ClientVersionInfo\0" 01 00.
    expect(bytes.toString('hex')).toContain('1200436c69656e7456657273696f6e496e666f000100');
    expect(rmcCodec.decode(bytes, {})).toEqual(json);
  });
});

describe('rmc codec: malformed input', () => {
  it('a String without its NUL is ERR_BAD_STRING', () => {
    const b = seedError();
    b[4 + 2 + 13] = 0x41; // the NUL of "LoginProtocol"
    expect(decodeError(() => rmcCodec.decode(b, {})).code).toBe('ERR_BAD_STRING');
  });

  it('a bool other than 0/1 is ERR_BAD_VALUE', () => {
    const b = seedRequest();
    b[20] = 2; // isRequest
    const e = decodeError(() => rmcCodec.decode(b, {}));
    expect(e.code).toBe('ERR_BAD_VALUE');
    expect(e.offset).toBe(20);
  });

  it('a String running past its packet is ERR_OVERRUN when more bytes follow', () => {
    const b = Buffer.concat([seedError(), seedError()]);
    b.writeUInt16LE(200, 22); // the namespace length of the first packet
    expect(decodeError(() => rmcCodec.decode(b, {})).code).toBe('ERR_OVERRUN');
  });

  it('bytes left inside a failure packet are ERR_TRAILING_BYTES', () => {
    const b = Buffer.concat([seedError(), Buffer.from([0])]);
    b.writeUInt32LE(38, 0);
    expect(decodeError(() => rmcCodec.decode(b, {})).code).toBe('ERR_TRAILING_BYTES');
  });

  it('empty input is ERR_INCOMPLETE', () => {
    expect(decodeError(() => rmcCodec.decode(Buffer.alloc(0), {})).code).toBe('ERR_INCOMPLETE');
  });

  it('an empty String written as 00 00 is accepted and re-encoded canonically as 01 00 00', () => {
    expect(decode(qString, Buffer.from('0000', 'hex'))).toBe('');
    expect(decode(qString, Buffer.from('010000', 'hex'))).toBe('');
    expect(encode(qString, '').toString('hex')).toBe('010000');
  });
});

describe('rmc codec: classic packed variant', () => {
  // Ghost Recon Online TicketGranting::LoginEx (spec §2.1, vector 7).
  const loginEx = Buffer.concat([
    Buffer.from('480000008a0800000002000000', 'hex'),
    Buffer.from('03007776002100', 'hex'),
    Buffer.from('UbiAuthenticationLoginCustomData\0', 'latin1'),
    Buffer.from('130000000f000000', 'hex'),
    Buffer.from('0300777600010000050074657374' + '00', 'hex'),
  ]);

  it('decodes the GRO LoginEx request and re-encodes it byte-exactly', () => {
    expect(loginEx.length).toBe(0x48 + 4);
    const json = rmcCodec.decode(loginEx, { variant: 'classic' }) as Record<string, unknown>;
    expect(json).toMatchObject({ type: 'request', protocolId: 0x0a, callId: 8, methodId: 2 });
    expect(rmcCodec.encode(json, { variant: 'classic' }).equals(loginEx)).toBe(true);
    // Its arguments are a String and an AnyDataHolder.
    const args = decode(
      struct({ userName: qString, data: anyDataHolder }),
      Buffer.from(json.args as string, 'hex'),
    );
    expect(args.userName).toBe('wv');
    expect(args.data.typeName).toBe('UbiAuthenticationLoginCustomData');
    expect(args.data.data.length).toBe(15);
  });

  it('responses carry methodId | 0x8000; failures a u32 code and the call id', () => {
    const ok = { type: 'response', protocolId: 0x0a, callId: 8, methodId: 2, results: '01000100' };
    const okBytes = rmcCodec.encode(ok, { variant: 'classic' });
    expect(okBytes.toString('hex')).toBe('0e0000000a01080000000280000001000100');
    expect(rmcCodec.decode(okBytes, { variant: 'classic' })).toEqual(ok);
    const fail = { type: 'error', protocolId: 0x0a, errorCode: 0x80010002, callId: 8 };
    const failBytes = rmcCodec.encode(fail, { variant: 'classic' });
    expect(failBytes.toString('hex')).toBe('0a0000000a000200018008000000');
    expect(rmcCodec.decode(failBytes, { variant: 'classic' })).toEqual(fail);
  });

  it('protocol ids from 0x7F use the extended u16 form', () => {
    const req = { type: 'request', protocolId: 0x1234, callId: 1, methodId: 3, args: '' };
    const bytes = rmcCodec.encode(req, { variant: 'classic' });
    expect(bytes.subarray(4, 7).toString('hex')).toBe('ff3412');
    expect(rmcCodec.decode(bytes, { variant: 'classic' })).toEqual(req);
  });

  it('a response method id without the 0x8000 bit is ERR_BAD_VALUE', () => {
    const bad = Buffer.from('0e0000000a01080000000200000001000100', 'hex');
    expect(decodeError(() => rmcCodec.decode(bad, { variant: 'classic' })).code).toBe('ERR_BAD_VALUE');
  });
});

describe('rmc codec: nex-verbose variant', () => {
  it('writes failures as a u32 code and the call id', () => {
    const fail = { type: 'error', protocol: 'LoginProtocol', errorCode: 0x80010002, callId: 5 };
    const bytes = rmcCodec.encode(fail, { variant: 'nex-verbose' });
    expect(bytes.subarray(20).toString('hex')).toBe('00000200018005000000');
    expect(rmcCodec.decode(bytes, { variant: 'nex-verbose' })).toEqual(fail);
  });

  it('decodes requests exactly like the HyperScape variant', () => {
    expect(rmcCodec.decode(seedRequest(), { variant: 'nex-verbose' })).toEqual(
      rmcCodec.decode(seedRequest(), {}),
    );
  });
});

describe('decodeStream', () => {
  it('decodes several packets', () => {
    expect(decodeStream(Buffer.concat([seedRequest(), seedRequest()]), 'hyperscape')).toHaveLength(2);
  });
});

describe('typed arguments stay byte-exact', () => {
  it('a non-canonical empty String inside arguments keeps the arguments as hex', () => {
    // Register_V1 with one StationURL written as 00 00 (an empty String, non-canonical form).
    const json = {
      type: 'request',
      protocol: 'LoginProtocol',
      callId: 1,
      method: 'LoginProtocol::Register_V1',
      classVersions: [],
      args: '010000000000',
    };
    const bytes = rmcCodec.encode(json, {});
    expect(rmcCodec.decode(bytes, {})).toEqual(json);
    expect(rmcCodec.encode(rmcCodec.decode(bytes, {}), {}).equals(bytes)).toBe(true);
  });
});

describe('describe', () => {
  it('prints signatures from the declarations', async () => {
    const { describeMethod, LoginProtocol, SessionProtocol, typeName, map, u32 } = await import(
      '../../../src/protocols/rmc/index.js'
    );
    expect(describeMethod(LoginProtocol.methods.Register_V1)).toBe(
      'LoginProtocol::Register_V1(vecMyURLs: List<StationURL>) -> (retval: qResult, pidConnectionID: u32, urlPublic: StationURL)',
    );
    expect(describeMethod(SessionProtocol.methods.CreateSession_V1)).toContain('reserved: bytes[9]');
    expect(typeName(map(qString, u32))).toBe('List<{key: String, value: u32}>');
  });
});
