/**
 * Running part of a test inside a network namespace of its own (`unshare -rn`): there, the
 * loopback interface can hold any addresses the test needs (several IPv6 addresses in one /64,
 * say) without touching the machine's network. The part runs as a Node script (it imports the
 * built package from dist/, as the CLI tests do) and prints one JSON line.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '..', '..');

/**
 * Whether this machine lets us create a user and network namespace. Under CI=true it must
 * (the test fails instead of saying what it did not check).
 */
export function canUnshare(): boolean {
  const r = spawnSync('unshare', ['-rn', 'sh', '-c', 'command -v ip >/dev/null && ip link set lo up'], {
    encoding: 'utf8',
  });
  if (r.status !== 0 && process.env.CI === 'true')
    throw new Error(`unshare -rn and ip are required in CI: ${r.stderr?.trim() ?? r.error?.message}`);
  return r.status === 0;
}

/**
 * Runs `script` (a path under test/) with `input` as its JSON argument in a fresh network
 * namespace whose loopback holds `addresses` (besides 127.0.0.1 and ::1). Returns its parsed
 * JSON output; fails with its stderr when it exits non-zero.
 */
export function runInNetns<T>(script: string, addresses: readonly string[], input: unknown): T {
  if (!existsSync(path.join(ROOT, 'dist', 'src', 'index.js')))
    throw new Error('dist/ is not built: run npm run build');
  const setup = [
    'ip link set lo up',
    ...addresses.map(
      (a) => `ip ${a.includes(':') ? '-6 ' : ''}addr add ${a} dev lo${a.includes(':') ? ' nodad' : ''}`,
    ),
    'exec "$0" "$@"',
  ].join(' && ');
  const r = spawnSync(
    'unshare',
    ['-rn', 'sh', '-c', setup, process.execPath, path.join(ROOT, script), JSON.stringify(input)],
    { encoding: 'utf8', timeout: 60_000 },
  );
  if (r.status !== 0) throw new Error(`${script} failed (${r.status ?? r.signal}): ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}
