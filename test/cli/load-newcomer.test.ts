/**
 * `gamewire load` as a newcomer runs it: the README's crowd against the relay `serve` starts
 * with its defaults, a bare `--target` host with each unity-relay `--transport`, a run nobody
 * gets into, an allocation API that keeps refusing, Ctrl-C, and the TLS flags `conform` and the
 * clients share. Every case spawns the real CLI; the cases run at once (each that fills a relay
 * has one of its own, and each that allocates comes from its own address).
 */
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, type CliResult, cliEnv, errorOf, ROOT, runChild, runCliAsync } from '../helpers/cli.js';
import { type RelayPorts, type Served, startServe, startUnityRelayServe } from '../helpers/serve.js';

/** Runs the CLI without blocking this process; `onStderr` sees stderr as it comes. */
function runLoad(
  args: string[],
  onStart?: (child: ChildProcess) => void,
): Promise<CliResult & { signal: NodeJS.Signals | null }> {
  return runChild(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: cliEnv(),
    stdin: 'pipe',
    timeoutMs: 60_000,
    onSpawn: onStart,
  });
}

/** The error line (the last line of stderr). */
function lastError(r: CliResult): { code: string; message: string } {
  const lines = r.stderr.trim().split('\n');
  return (JSON.parse(lines[lines.length - 1]!) as { error: { code: string; message: string } }).error;
}

describe.concurrent('load nox-relay against the default relay (one public instance of 32)', () => {
  // A relay for each case: the README's crowd fills the one instance, the refusal counts the
  // players already in, and Ctrl-C's two players would take two of the places.
  let relay: Served;
  let port: number;
  let refusing: Served;
  let ctrlC: Served;
  beforeAll(async () => {
    const start = () => startServe(['nox-relay', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
    const started = await Promise.allSettled([start(), start(), start()]);
    const up = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    if (up.length < started.length) {
      await Promise.all(up.map((s) => s.stop()));
      throw (started.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason;
    }
    [relay, refusing, ctrlC] = up as [Served, Served, Served];
    port = relay.port('udp');
  });
  afterAll(async () => {
    await Promise.all([relay?.stop(), refusing?.stop(), ctrlC?.stop()]);
  });

  it("the README's crowd (--clients 32) all get in", async () => {
    // 5 s for all 32 to get in while the other cases run too (this file's longest case, the
    // DTLS one, takes longer still).
    const r = await runLoad([
      'load',
      'nox-relay',
      '--target',
      `127.0.0.1:${port}`,
      '--clients',
      '32',
      '--duration',
      '5',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout) as { sessions: { joined: number; failed: number }; ok: boolean };
    expect(s.sessions).toMatchObject({ joined: 32, failed: 0 });
    expect(s.ok).toBe(true);
  });

  it('more players than the instances hold is refused before any traffic, with the number that fits', async () => {
    const r = await runLoad([
      'load',
      'nox-relay',
      '--target',
      `127.0.0.1:${refusing.port('udp')}`,
      '--clients',
      '64',
    ]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    const e = errorOf(r);
    expect(e.code).toBe('ERR_LOAD_CAPACITY');
    expect(e.message).toContain('--clients 32');
    expect(e.message).toContain('--instances FILE');
  });

  it('Ctrl-C ends the run with its summary, says it was interrupted, and exits 130', async () => {
    const r = await runLoad(
      [
        'load',
        'nox-relay',
        '--target',
        `127.0.0.1:${ctrlC.port('udp')}`,
        '--clients',
        '2',
        '--duration',
        '60',
        '--progress',
      ],
      (child) => {
        // Once the progress line shows both players in, press Ctrl-C.
        let seen = '';
        child.stderr!.on('data', (d: Buffer) => {
          seen += d.toString();
          if (/joined 2/.test(seen) && !child.killed) child.kill('SIGINT');
        });
      },
    );
    expect(r.code, r.stderr).toBe(130);
    expect(r.stdout).toMatch(/^nox-relay load on .*interrupted \(SIGINT\)/);
    expect(r.stdout).toMatch(/sessions: 2 started, 2 joined/);
    expect(lastError(r).code).toBe('ERR_LOAD_INTERRUPTED');
  });
});

describe.concurrent('load unity-relay: ports, reasons, refusals, TLS flags', () => {
  let relay: Served;
  let ports: RelayPorts;
  beforeAll(async () => {
    // Two allocations a minute from one address: the third game is refused.
    ({ relay, ports } = await startUnityRelayServe(['--unity-allocations-per-minute-per-address', '2']));
  });
  afterAll(async () => {
    await relay?.stop();
  });

  it("a bare --target host takes the --transport's own default port", async () => {
    // The API is somewhere closed: nothing is sent to the relay, the summary names the target.
    const runs = (
      [
        ['udp', 37000],
        ['dtls', 37001],
        ['ws', 37002],
        ['wss', 37003],
      ] as const
    ).map(async ([transport, port]) => {
      const r = await runCliAsync([
        'load',
        'unity-relay',
        '--target',
        '127.0.0.1',
        '--transport',
        transport,
        '--api',
        'http://127.0.0.1:1',
        '--clients',
        '1',
        '--json',
      ]);
      expect(r.code, r.stderr).toBe(1);
      expect((JSON.parse(r.stdout) as { target: string }).target, transport).toBe(`127.0.0.1:${port}`);
    });
    const help = runCliAsync(['load', 'unity-relay', '--help']);
    await Promise.all(runs);
    expect((await help).stdout).toMatch(/dtls 37001,\s+ws\s+37002,\s+wss\s+37003/);
  });

  it('a run nobody got into says where they were stuck (DTLS to the UDP port)', async () => {
    const r = await runLoad([
      'load',
      'unity-relay',
      '--target',
      `127.0.0.1:${ports.udp}`,
      '--transport',
      'dtls',
      '--api',
      `http://127.0.0.1:${ports.api}`,
      '--clients',
      '1',
      '--duration',
      '2',
    ]);
    expect(r.code).toBe(1);
    const e = lastError(r);
    expect(e.code).toBe('ERR_LOAD_NO_CLIENT');
    expect(e.message).toContain(`BIND over dtls to 127.0.0.1:${ports.udp}`);
    expect(e.message).toContain('--transport dtls');
    expect(r.stdout).toMatch(/not in when the run ended: 1 at "BIND over dtls/);
  });

  it('--insecure (and the former --tls-insecure) for wss, as conform and the clients spell it', async () => {
    const help = (await runCliAsync(['load', 'unity-relay', '--help'])).stdout;
    expect(help).toMatch(/--ca <file>/);
    expect(help).toMatch(/--insecure/);
    expect(help).not.toMatch(/--tls-/);
    // Both spellings at once, each from its own address (two allocations a minute per address).
    await Promise.all(
      ['--insecure', '--tls-insecure'].map(async (flag) => {
        const r = await runLoad([
          'load',
          'unity-relay',
          '--target',
          `127.0.0.1:${ports.wss}`,
          '--transport',
          'wss',
          '--api',
          `http://127.0.0.1:${ports.api}`,
          '--from',
          flag === '--insecure' ? '127.0.0.21' : '127.0.0.22',
          '--clients',
          '1',
          '--duration',
          '1.5',
          flag,
          '--json',
        ]);
        expect(r.code, `${flag}: ${r.stderr}`).toBe(0);
        expect((JSON.parse(r.stdout) as { sessions: { joined: number } }).sessions.joined).toBe(1);
      }),
    );
  });

  it('an allocation API that keeps answering 429 says what to do: wait, --from, --api-key', async () => {
    const r = await runLoad([
      'load',
      'unity-relay',
      '--target',
      `127.0.0.1:${ports.udp}`,
      '--api',
      `http://127.0.0.1:${ports.api}`,
      '--from',
      '127.0.0.31',
      '--clients',
      '3',
      '--duration',
      '10',
      '--json',
    ]);
    expect(r.code).toBe(1);
    const s = JSON.parse(r.stdout) as { errorMessages: Record<string, string> };
    const message = s.errorMessages.ERR_RELAY_API_THROTTLED ?? '';
    expect(message).toMatch(/retry in \d+ s/);
    expect(message).toContain('--from 127.0.0.2-9');
    expect(message).toContain('--api-key');
  }, 40_000);
});
