/**
 * Every DTLS test here runs on both record layers: this file's run uses the JavaScript one (the
 * server's own socket), and runs the whole directory again with GAMEWIRE_DATAPLANE=native, where
 * the unity-relay native data plane owns the socket and opens and seals the records of established
 * associations (src/protocols/unity-relay/native-dtls.ts).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadNativeDataplane } from '../../../src/protocols/unity-relay/native-dataplane.js';

const root = join(import.meta.dirname, '..', '..', '..');
const nested = process.env.GAMEWIRE_DATAPLANE !== undefined;
const addon = loadNativeDataplane().addon;
// The native plane is part of the product on Linux: there the DTLS suite must run on it.
if (process.platform === 'linux' && (addon === undefined || !addon.dtlsAvailable()))
  throw new Error(`the native DTLS record layer is not available: ${loadNativeDataplane().reason}`);

describe.runIf(!nested && process.platform === 'linux')('DTLS tests on the native record layer', () => {
  it('every test in test/transports/dtls passes with the native data plane owning the socket', () => {
    const r = spawnSync(
      process.execPath,
      [
        join(root, 'node_modules', 'vitest', 'vitest.mjs'),
        'run',
        'test/transports/dtls',
        '--reporter=dot',
        '--no-file-parallelism',
      ],
      {
        cwd: root,
        encoding: 'utf8',
        env: { ...process.env, GAMEWIRE_DATAPLANE: 'native', GAMEWIRE_TESTS_BUILT: '1' },
        timeout: 600_000,
      },
    );
    const out = `${r.stdout}\n${r.stderr}`;
    expect(r.status, out.slice(-4000)).toBe(0);
    const passed = /Tests\s+(\d+) passed/.exec(out.replace(/\u001b\[[0-9;]*m/g, ''));
    expect(Number(passed?.[1] ?? 0)).toBeGreaterThan(90);
  }, 660_000);
});
