/**
 * Debian's mbedTLS (libmbedtls-dev; UnityTLS is built on mbedTLS 2.x) as a DTLS client for the
 * tests: test/fixtures/mbedtls-dtls-client.c compiled once per test process. In CI (CI=true) a
 * missing compiler or library fails the test that needs it instead of skipping it.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const fixture = join(import.meta.dirname, '..', 'fixtures', 'mbedtls-dtls-client.c');
let built: { path?: string; error?: string } | undefined;

/** The compiled client's path, or undefined (with the reason) where it cannot be built outside CI. */
export function mbedtlsClient(): string | undefined {
  if (built === undefined) {
    const out = join(mkdtempSync(join(tmpdir(), 'gw-mbedtls-')), 'mbedtls-dtls-client');
    const r = spawnSync(
      'cc',
      ['-O1', '-Wall', '-Wextra', '-o', out, fixture, '-lmbedtls', '-lmbedx509', '-lmbedcrypto'],
      { encoding: 'utf8' },
    );
    built = r.status === 0 ? { path: out } : { error: r.error?.message ?? r.stderr };
  }
  if (built.path === undefined && process.env.CI === 'true')
    throw new Error(`the mbedTLS test client does not build (libmbedtls-dev missing?): ${built.error}`);
  return built.path;
}

export interface MbedtlsPeer {
  child: ChildProcess;
  /** Records received so far (one per line the client printed). */
  records(): Buffer[];
  stderr(): string;
  /** Sends `b` as one application record. */
  send(b: Buffer): void;
  stop(): Promise<void>;
}

/** Starts the mbedTLS client against host:port with a binary identity and key (any length). */
export function startMbedtls(path: string, port: number, identity: Buffer, psk: Buffer): MbedtlsPeer {
  const child = spawn(path, ['127.0.0.1', String(port), identity.toString('hex'), psk.toString('hex')], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  child.stdin!.on('error', () => {});
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    records: () =>
      out
        .slice(0, out.lastIndexOf('\n') + 1) // whole lines only
        .split('\n')
        .filter((l) => l.length > 0)
        .map((l) => Buffer.from(l, 'hex')),
    stderr: () => err,
    send: (b) => child.stdin!.write(`${b.toString('hex')}\n`),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
