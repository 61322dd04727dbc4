/**
 * The JavaScript fallback of the DTLS record layer: under a Node whose OpenSSL lacks a function
 * the native record layer looks up (BoringSSL has no AES-CCM), `serve unity-relay --dataplane
 * auto` keeps the native UDP plane, runs DTLS on the JavaScript record layer, and still relays.
 *
 * The symbol is hidden by a test build of the addon: the same recipe and sources, plus
 * test/fixtures/native-hide-symbols.c linked in front of dlsym (`-Wl,--wrap=dlsym`), which makes
 * the names in GAMEWIRE_TEST_HIDE_SYMBOLS look missing. Shipped builds have no such hook.
 */
import { spawnSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RelayApiClient, UnityRelayClient } from '../../../src/protocols/unity-relay/client.js';
import { ROOT } from '../../helpers/cli.js';
import { type Served, startServe } from '../../helpers/serve.js';

const linux = process.platform === 'linux' && (process.arch === 'x64' || process.arch === 'arm64');
/** One function the record layer needs that BoringSSL does not have. */
const HIDDEN = 'EVP_aes_128_ccm';

async function freeUdpPort(): Promise<number> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}

/** dtlsAvailable() of `addon` in a fresh Node (the addon looks its symbols up once per process). */
function dtlsAvailable(addon: string, hide?: string): boolean {
  const r = spawnSync(
    process.execPath,
    ['-e', 'console.log(require(process.argv[1]).dtlsAvailable())', addon],
    {
      encoding: 'utf8',
      env: { ...process.env, GAMEWIRE_TEST_HIDE_SYMBOLS: hide },
    },
  );
  if (r.status !== 0) throw new Error(`loading ${addon} failed: ${r.stderr}`);
  return r.stdout.trim() === 'true';
}

/** A host and a player through the relay; the host echoes; resolves with what the player got back. */
async function echo(
  api: string,
  host: 'udp' | 'dtls',
  player: 'udp' | 'dtls',
  text: string,
): Promise<string> {
  const client = new RelayApiClient(api);
  const h = await UnityRelayClient.host(client, 2, { connectionType: host });
  try {
    h.client.on('message', (data: Buffer, from: Buffer) => h.client.send(data, from));
    const p = await UnityRelayClient.join(client, h.joinCode, { connectionType: player });
    try {
      const back = new Promise<Buffer>((resolve) => p.once('message', resolve));
      p.send(Buffer.from(text));
      return String(await back);
    } finally {
      await p.close();
    }
  } finally {
    await h.client.close();
  }
}

describe.runIf(linux)(
  'the DTLS record layer falls back to JavaScript when an OpenSSL function is missing',
  () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-hook-addon-'));
    const addon = path.join(dir, 'relay_dataplane.node');
    let served: Served | undefined;
    let dtlsPort = 0;

    beforeAll(async () => {
      const r = spawnSync(
        process.execPath,
        [
          path.join(ROOT, 'scripts', 'build-native.mjs'),
          '--out',
          dir,
          '--with',
          path.join(ROOT, 'test', 'fixtures', 'native-hide-symbols.c'),
          '--wrap',
          'dlsym',
        ],
        { encoding: 'utf8', timeout: 300_000 },
      );
      if (r.status !== 0 || !/built .* sha256 /.test(r.stderr))
        throw new Error(`hook build failed:\n${r.stderr}`);
      dtlsPort = await freeUdpPort();
      served = await startServe(
        [
          'unity-relay',
          '--host',
          '127.0.0.1',
          '--port',
          '0',
          '--api-port',
          '0',
          '--dtls-port',
          String(dtlsPort),
          '--ws-port',
          '0',
          '--wss-port',
          '0',
          '--dataplane',
          'auto',
          '--no-admin',
        ],
        {
          env: {
            GAMEWIRE_NATIVE_ADDON: addon,
            GAMEWIRE_TEST_HIDE_SYMBOLS: HIDDEN,
            GAMEWIRE_DATAPLANE: undefined,
          },
        },
      );
    }, 300_000);
    afterAll(async () => {
      await served?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it('the hook hides exactly what it is told to (the same build without it runs DTLS natively)', () => {
      expect(dtlsAvailable(addon)).toBe(true);
      expect(dtlsAvailable(addon, HIDDEN)).toBe(false);
      expect(dtlsAvailable(addon, 'EVP_chacha20_poly1305')).toBe(false);
      expect(dtlsAvailable(addon, 'no_such_function')).toBe(true);
    });

    it('serve --dataplane auto: UDP stays native, DTLS runs on the JavaScript record layer (start-up lines)', () => {
      const lines = served!.endpoints.map((e) => `${e.transport} ${e.port} ${e.description}`);
      const relay = served!.endpoints.find((e) => e.transport === 'udp' && e.port !== dtlsPort);
      expect(relay?.description, lines.join('\n')).toContain('native data plane');
      const dtls = served!.endpoints.find((e) => e.transport === 'udp' && e.port === dtlsPort);
      expect(dtls?.description, lines.join('\n')).toContain('JavaScript record layer');
      expect(served!.stderr()).not.toMatch(/"level":(?:50|60)/);
    });

    it(`the DTLS start-up line names the reason (${HIDDEN} missing from Node's OpenSSL)`, () => {
      const dtls = served!.endpoints.find((e) => e.transport === 'udp' && e.port === dtlsPort);
      expect(dtls?.description).toContain(`lacks ${HIDDEN}`);
    });

    it('still relays: DTLS ↔ DTLS, DTLS ↔ UDP, and UDP ↔ UDP on the native plane', async () => {
      const api = `http://127.0.0.1:${served!.port('http')}`;
      expect(await echo(api, 'dtls', 'dtls', 'dtls to dtls')).toBe('dtls to dtls');
      expect(await echo(api, 'udp', 'dtls', 'dtls to udp')).toBe('dtls to udp');
      expect(await echo(api, 'udp', 'udp', 'udp to udp')).toBe('udp to udp');
    }, 60_000);
  },
);
