/**
 * Every client command against a target that is not there, through the spawned CLI: a name that
 * does not resolve, a closed port, something that accepts and never answers (TCP, or a UDP port
 * that swallows datagrams), a port that is not a port. Each ends with one JSON error line (the
 * last stderr line) naming the target, the right exit status, and no wait past its documented
 * timeout (the timeouts are lowered with the commands' own flags; the test's limit is the
 * backstop). The commands run at once (at most 8 at a time): each is its own process, and the
 * silent servers here only listen.
 */
import dgram from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, cliEnv, concurrencyLimit, ROOT, runChild } from '../helpers/cli.js';

/** RFC 6761: never resolves. */
const NOWHERE = 'gamewire-test.invalid';
const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-targets-'));
let closedPort = 0;
let silentTcp: net.Server;
let silentTcpPort = 0;
let silentUdp: dgram.Socket;
let silentUdpPort = 0;
let fakeApi: http.Server;
let fakeApiUrl = '';

beforeAll(async () => {
  const probe = net.createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
  closedPort = (probe.address() as net.AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  // Accepts and reads, never writes.
  silentTcp = net.createServer((s) => s.on('data', () => {}).on('error', () => {}));
  await new Promise<void>((r) => silentTcp.listen(0, '127.0.0.1', () => r()));
  silentTcpPort = (silentTcp.address() as net.AddressInfo).port;
  silentUdp = dgram.createSocket('udp4');
  silentUdp.on('message', () => {});
  await new Promise<void>((r) => silentUdp.bind(0, '127.0.0.1', () => r()));
  silentUdpPort = silentUdp.address().port;
  // An allocation API whose relay (the silent UDP port) never answers a BIND.
  fakeApi = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const allocation = {
        allocationId: '00000000-0000-4000-8000-000000000001',
        allocationIdBytes: Buffer.alloc(16, 1).toString('base64'),
        key: Buffer.alloc(64, 2).toString('base64'),
        connectionData: Buffer.alloc(255, 3).toString('base64'),
        hostConnectionData: Buffer.alloc(255, 3).toString('base64'),
        region: 'local-1',
        relayServer: { ipV4: '127.0.0.1', port: silentUdpPort },
        serverEndpoints: [
          {
            connectionType: 'udp',
            host: '127.0.0.1',
            port: silentUdpPort,
            network: 'udp',
            reliable: false,
            secure: false,
          },
        ],
      };
      const data = req.url === '/v1/joincode' ? { joinCode: 'ABCDEF' } : { allocation };
      res.writeHead(req.url === '/v1/join' ? 200 : 201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ meta: {}, links: {}, data }));
    });
  });
  await new Promise<void>((r) => fakeApi.listen(0, '127.0.0.1', () => r()));
  fakeApiUrl = `http://127.0.0.1:${(fakeApi.address() as net.AddressInfo).port}`;
});

afterAll(() => {
  silentTcp?.close();
  silentUdp?.close();
  fakeApi?.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  error: { code: string; message: string };
}

/** The commands run at once, at most 8 at a time (a burst of all of them would starve other files). */
const limit = concurrencyLimit(8);

/** Runs the command to its end (killed after `limitMs`: a hang fails the test). */
function run(args: string[], limitMs = 45_000): Promise<Run> {
  return limit(() => runNow(args, limitMs));
}

async function runNow(args: string[], limitMs: number): Promise<Run> {
  const { code, stdout, stderr, timedOut } = await runChild(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: cliEnv(),
    timeoutMs: limitMs,
    endOn: 'exit',
  });
  if (timedOut) throw new Error(`still running after ${limitMs} ms: ${args.join(' ')}; stderr: ${stderr}`);
  const last = stderr.trim().split('\n').at(-1) ?? '';
  let error = { code: '', message: '' };
  try {
    error = (JSON.parse(last) as { error: typeof error }).error;
  } catch {
    // asserted below: the last line must be the error line
  }
  return { code, stdout, stderr, error };
}

/** The contract for a failure: status, code, the target named, no stack trace, no other junk. */
function expectFailure(r: Run, status: number, code: string, names: string | RegExp): void {
  expect(r.code, r.stderr).toBe(status);
  expect(r.error.code, r.stderr).toBe(code);
  if (typeof names === 'string') expect(r.error.message).toContain(names);
  else expect(r.error.message).toMatch(names);
  expect(r.stderr).not.toMatch(/^\s+at .+[:(]\d+/m);
  // Every stderr line is a JSON error object (progress lines of bots included).
  for (const line of r.stderr.trim().split('\n'))
    expect(Object.keys(JSON.parse(line) as object), line).toEqual(['error']);
}

/** A command's run and what `expectFailure` checks of it. */
type Case = [run: Promise<Run>, status: number, code: string, names: string | RegExp];

/** Every case's command runs at once; then each is checked as `expectFailure` does, in order. */
async function expectFailures(cases: Case[]): Promise<void> {
  const runs = await Promise.all(cases.map(([r]) => r));
  for (const [i, [, status, code, names]] of cases.entries()) expectFailure(runs[i]!, status, code, names);
}

describe.concurrent('nox-relay bots against a missing relay', { timeout: 150_000 }, () => {
  const bots = (extra: string[]) => ['nox-relay', 'bots', '--count', '3', ...extra];

  it('udp, a name that does not resolve: every bot fails at once; one line per kind, then the summary error', async () => {
    const r = await run(bots(['--host', NOWHERE, '--duration', '30']));
    expectFailure(r, 1, 'ERR_BOTS', `no bot connected to ${NOWHERE}:23032 over udp (all 3 failed`);
    // Whichever bot failed first (lookups race), its line names the host and the flag.
    expect(r.stderr).toMatch(
      new RegExp(
        `"code":"ERR_CONNECT","message":"bot \\d: cannot resolve the host of ${NOWHERE.replaceAll('.', '\\.')}:23032: check --host"`,
      ),
    );
    expect(r.stderr.trim().split('\n')).toHaveLength(2);
    // The per-second lines and the summary stay on stdout; nothing about errors goes there.
    const summary = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { summary: Record<string, unknown> };
    expect(summary.summary).toMatchObject({
      entered: 0,
      failed: 3,
      ended: 'all_failed',
      failedByCode: { ERR_CONNECT: 3 },
    });
    expect(r.stdout).not.toContain('"error"');
  });

  it('udp, a closed port: refused at once (ICMP), not after the request timeout', async () => {
    const r = await run(bots(['--port', String(closedPort), '--duration', '30', '--timeout-ms', '20000']));
    expectFailure(r, 1, 'ERR_BOTS', `no bot connected to 127.0.0.1:${closedPort} over udp (all 3 failed`);
    expect(r.stderr).toContain(`no server at 127.0.0.1:${closedPort}`);
  });

  it('udp, a port that swallows everything: --duration holds, exit 1, the summary says no bot connected', async () => {
    const r = await run(bots(['--port', String(silentUdpPort), '--duration', '2', '--timeout-ms', '20000']));
    expectFailure(
      r,
      1,
      'ERR_BOTS',
      `no bot connected to 127.0.0.1:${silentUdpPort} over udp (nothing answered within the 2 s run)`,
    );
    const summary = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as {
      summary: { seconds: number; ended: string; entered: number };
    };
    expect(summary.summary.ended).toBe('duration');
    expect(summary.summary.entered).toBe(0);
    // Ended by the duration (2 s), not by the 20 s request timeout.
    expect(summary.summary.seconds).toBeLessThan(10);
  });

  it('tcp: unresolvable, closed and silent targets', async () => {
    const [a, b, c] = await Promise.all([
      run(bots(['--transport', 'tcp', '--host', NOWHERE, '--duration', '30'])),
      run(bots(['--transport', 'tcp', '--port', String(closedPort), '--duration', '30'])),
      // No --duration (until Ctrl-C): it still ends, because every bot timed out.
      run(bots(['--transport', 'tcp', '--port', String(silentTcpPort), '--timeout-ms', '1000'])),
    ]);
    expectFailure(a, 1, 'ERR_BOTS', `${NOWHERE}:23032 over tcp`);
    expect(a.stderr).toContain('check --host');
    expectFailure(b, 1, 'ERR_BOTS', `no server at 127.0.0.1:${closedPort}`);
    expectFailure(
      c,
      1,
      'ERR_BOTS',
      `no Handshake reply to uid 1 within 1000 ms: is the relay running at 127.0.0.1:${silentTcpPort} (tcp)?`,
    );
  });

  it('a port that is not a port is bad usage (exit 2)', async () => {
    await Promise.all(
      ['0', '65536', 'x'].map(async (port) => {
        const r = await run(bots(['--port', port]));
        expectFailure(r, 2, 'ERR_USAGE', `"${port}" is not a port`);
      }),
    );
  });
});

describe.concurrent('js5 download against a missing server', { timeout: 150_000 }, () => {
  const dl = (extra: string[]) => [
    'js5',
    'download',
    '--out',
    path.join(dir, `js5-${Math.random()}`),
    ...extra,
  ];

  it('unresolvable, closed, silent, and a bad port', async () => {
    await expectFailures([
      [
        run(dl(['--host', NOWHERE])),
        1,
        'ERR_JS5_CONNECTION',
        `cannot resolve the host of ${NOWHERE}:43594: check --host`,
      ],
      [
        run(dl(['--port', String(closedPort)])),
        1,
        'ERR_JS5_NO_SERVER',
        `no server at 127.0.0.1:${closedPort}`,
      ],
      [
        run(dl(['--port', String(silentTcpPort), '--timeout-ms', '1000'])),
        1,
        'ERR_JS5_TIMEOUT',
        `no js5 handshake reply from 127.0.0.1:${silentTcpPort} within 1000 ms`,
      ],
      [run(dl(['--port', '0'])), 2, 'ERR_USAGE', '"0" is not a port'],
    ]);
  });
});

describe.concurrent('rmc call against a missing server', { timeout: 150_000 }, () => {
  const call = (extra: string[]) => ['rmc', 'call', 'TicketGranting::Login_V1', ...extra];
  const prudp = ['--transport', 'prudp', '--access-key', '6f599f81'];

  it('tcp: unresolvable, closed, silent, and a bad port', async () => {
    await expectFailures([
      [
        run(call(['--host', NOWHERE])),
        1,
        'ERR_CONNECT',
        `cannot resolve the host of ${NOWHERE}:9103: check --host`,
      ],
      [run(call(['--port', String(closedPort)])), 1, 'ERR_CONNECT', `no server at 127.0.0.1:${closedPort}`],
      [
        run(call(['--port', String(silentTcpPort), '--timeout', '1000'])),
        1,
        'ERR_RMC_TIMEOUT',
        `timed out after 1000 ms: no answer from 127.0.0.1:${silentTcpPort}`,
      ],
      [run(call(['--port', '70000'])), 2, 'ERR_USAGE', '"70000" is not a port'],
    ]);
  });

  it('prudp: unresolvable (not "Port should be > 0") and a port that never answers', async () => {
    await expectFailures([
      [
        run(call([...prudp, '--host', NOWHERE])),
        1,
        'ERR_CONNECT',
        `cannot resolve the host of ${NOWHERE}:9103`,
      ],
      [
        run(call([...prudp, '--port', String(silentUdpPort)])),
        1,
        'ERR_PRUDP_TIMEOUT',
        `PRUDP connect to 127.0.0.1:${silentUdpPort} timed out: is \`gamewire serve rmc\` running at 127.0.0.1:${silentUdpPort} (UDP)`,
      ],
    ]);
  });
});

describe.concurrent('unity-relay host and join against a missing API or relay', { timeout: 150_000 }, () => {
  const commands = [
    ['unity-relay', 'host'],
    ['unity-relay', 'join', 'ABCDEF'],
  ];

  it('the API: unresolvable (names --api), closed, silent', async () => {
    await expectFailures(
      commands.flatMap((cmd): Case[] => [
        [
          run([...cmd, '--api', `http://${NOWHERE}:37080`]),
          1,
          'ERR_CONNECT',
          `cannot resolve the host of http://${NOWHERE}:37080: check --api`,
        ],
        [
          run([...cmd, '--api', `http://127.0.0.1:${closedPort}`]),
          1,
          'ERR_CONNECT',
          `no server at http://127.0.0.1:${closedPort}`,
        ],
        [
          run([...cmd, '--api', `http://127.0.0.1:${silentTcpPort}`, '--api-timeout-ms', '1000']),
          1,
          'ERR_RELAY_API_TIMEOUT',
          `the allocation API at http://127.0.0.1:${silentTcpPort} did not answer POST /v1/`,
        ],
      ]),
    );
  });

  it('a relay that never answers BIND: gives up after --relay-timeout-ms, naming the relay', async () => {
    await expectFailures(
      commands.map(
        (cmd): Case => [
          run([...cmd, '--api', fakeApiUrl, '--ping-interval-ms', '500', '--relay-timeout-ms', '2000']),
          1,
          'ERR_RELAY_BIND_TIMEOUT',
          `the relay at 127.0.0.1:${silentUdpPort} (udp) did not answer 2 BIND messages`,
        ],
      ),
    );
  });
});
