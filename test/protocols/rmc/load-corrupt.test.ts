/**
 * `gamewire load rmc` catches a corrupted answer: a TCP proxy between the HyperScape players and
 * a spawned `serve rmc` flips one bit of one call's response payload (the frame decoded with the
 * protocol's envelope, its results with Register_V1's declaration, one field changed, both
 * re-encoded: the length, the envelope and the call id are intact), and the run reports
 * `corrupt_response` and fails, in process and as the real CLI (exit 1). Before, the generator
 * looked only at the number echoed in the URL: a changed result, connection id or any other
 * character of the URL went unseen.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hyperscapePacket, type VerboseResponseMessage } from '../../../src/protocols/rmc/messages.js';
import { LoginProtocol } from '../../../src/protocols/rmc/protocols/login.js';
import { decode, encode } from '../../../src/wire/index.js';
import { runCliAsync } from '../../helpers/cli.js';
import {
  bitDifference,
  type Corrupt,
  CorruptingTcpProxy,
  expectOneViolation,
} from '../../helpers/corrupting-proxy.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

let server: Served;
let port = 0;

beforeAll(async () => {
  server = await startServe(['rmc', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  port = server.port('tcp');
});

afterAll(async () => {
  await server?.stop();
});

type Results = ReturnType<typeof LoginProtocol.methods.Register_V1.results.read>;
const results = LoginProtocol.methods.Register_V1.results;

/** A u32 LE length, then that many bytes. */
const frame = (buf: Buffer) => (buf.length < 4 ? undefined : 4 + buf.readUInt32LE(0));

/** Flips one bit of a string's ASCII character at `index`. */
function flipChar(s: string, index: number, bit: number): string {
  return s.slice(0, index) + String.fromCharCode(s.charCodeAt(index) ^ (1 << bit)) + s.slice(index + 1);
}

/**
 * Rewrites the results of the `nth` (1-based) Register_V1 answer the relay sends with `change`;
 * `diffs` gets the bits that differ between the frame and its corrupted copy.
 */
function corruptRegister(nth: number, change: (r: Results) => Results, diffs: number[][]): Corrupt {
  let seen = 0;
  return (bytes) => {
    const m = decode(hyperscapePacket, bytes);
    if (m.type !== 'response' || !/Register_V1\*$/.test(m.method) || ++seen !== nth) return undefined;
    const changed = encode(results, change(decode(results, m.results)));
    const out = encode(hyperscapePacket, { ...m, results: changed } satisfies VerboseResponseMessage);
    diffs.push(bitDifference(bytes, out));
    return out;
  };
}

const cases: { what: string; change: (r: Results) => Results }[] = [
  // 'sid=15' → 'sid=14': a parameter the server echoes, not the call's number.
  {
    what: 'a character of the public URL',
    change: (r) => ({ ...r, urlPublic: flipChar(r.urlPublic, r.urlPublic.indexOf('sid=') + 5, 0) }),
  },
  { what: 'the connection id', change: (r) => ({ ...r, pidConnectionID: r.pidConnectionID ^ 0x10 }) },
  { what: 'the result code', change: (r) => ({ ...r, retval: r.retval ^ 0x100 }) },
];

describe('load rmc through a link that flips one bit of one call answer', () => {
  for (const { what, change } of cases) {
    it(`a flipped bit in ${what} is corrupt_response, and the run fails`, async () => {
      const diffs: number[][] = [];
      // The third Register answer: the login's is the first, the shape the others are held to.
      const proxy = await CorruptingTcpProxy.start(
        { host: '127.0.0.1', port },
        { frame, corrupt: corruptRegister(3, change, diffs) },
      );
      try {
        const s = await runProtocolLoad(
          'rmc',
          { target: { host: '127.0.0.1', port: proxy.port }, clients: 1, durationS: 2 },
          { transport: 'tcp', callRate: 10 },
        );
        expect(proxy.stats.corrupted).toBe(1);
        expect(diffs.map((d) => d.length)).toEqual([1]);
        expect(s.sessions).toMatchObject({ joined: 1, failed: 0 });
        expect(s.violations).toEqual({ corrupt_response: 1 });
        expect(s.violationSamples[0]).toMatch(/^corrupt_response: call #2 of session 0 answered with /);
        expect(s.ok).toBe(false);
      } finally {
        await proxy.close();
      }
    });
  }

  it('`gamewire load rmc` names the violation and exits 1', async () => {
    const diffs: number[][] = [];
    const proxy = await CorruptingTcpProxy.start(
      { host: '127.0.0.1', port },
      { frame, corrupt: corruptRegister(4, cases[0]!.change, diffs) },
    );
    try {
      const r = await runCliAsync([
        'load',
        'rmc',
        '--target',
        `127.0.0.1:${proxy.port}`,
        '--transport',
        'tcp',
        '--call-rate',
        '10',
        '--clients',
        '2',
        '--duration',
        '2',
        '--json',
      ]);
      expect(diffs.map((d) => d.length)).toEqual([1]);
      expectOneViolation(r, 'corrupt_response');
    } finally {
      await proxy.close();
    }
  });
});
