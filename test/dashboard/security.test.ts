/**
 * The admin endpoint of a real `gamewire serve`, over real HTTP: on by default on loopback, a
 * token everywhere when bound beyond it (reached at 127.0.0.1 and at this machine's other
 * address), the cookie login, POST-only actions with the action token, the DNS-rebinding guard,
 * no CORS, and 401s that carry no data.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, cliEnv, errorOf, ROOT, runCli } from '../helpers/cli.js';

const TOKEN = 'admin-token-for-tests-0123456789';
const children: ChildProcess[] = [];
const dirs: string[] = [];

afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Starts `serve unity-relay` on free ports and resolves with its stdout lines once it is ready. */
function serve(args: string[]): Promise<{ child: ChildProcess; lines: string[] }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'gw-admin-'));
  dirs.push(dir);
  const child = spawn(
    process.execPath,
    [
      BIN,
      'serve',
      'unity-relay',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--api-port',
      '0',
      '--dtls-port',
      '0',
      '--ws-port',
      '0',
      '--wss-port',
      '0',
      '--data-dir',
      dir,
      '--log-level',
      'warn',
      ...args,
    ],
    { cwd: ROOT, env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  children.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${out}${err}`)), 30_000);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      // The admin line comes last; with --no-admin the relay's API line is the last one.
      if (/gamewire: dashboard |allocation API/.test(out) && out.endsWith('\n')) {
        if (args.includes('--no-admin') || /gamewire: dashboard /.test(out)) {
          clearTimeout(timer);
          resolve({ child, lines: out.trim().split('\n') });
        }
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited ${code}: ${out}${err}`));
    });
  });
}

function adminPort(lines: string[]): number {
  const line = lines.find((l) => l.startsWith('gamewire: dashboard '));
  if (line === undefined) throw new Error(`no admin line in ${lines.join('\n')}`);
  return Number(/:(\d+)\//.exec(line)![1]);
}

/** This machine's first non-loopback IPv4 address, when it has one. */
function otherAddress(): string | undefined {
  for (const list of Object.values(os.networkInterfaces()))
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return undefined;
}

/** GET with a chosen Host header (fetch does not let one set it). */
function getWithHost(
  port: number,
  p: string,
  host: string,
  extra: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, headers: { host, ...extra } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += d.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
  });
}

function expectNoCors(r: Response): void {
  for (const [k] of r.headers) expect(k.startsWith('access-control-')).toBe(false);
}

describe('the admin endpoint of gamewire serve', () => {
  it('bound beyond loopback with a token: every data request needs it, at every address', async () => {
    const { lines } = await serve(['--admin-host', '0.0.0.0', '--admin-token', TOKEN]);
    const port = adminPort(lines);
    expect(lines).toContain(
      `gamewire: dashboard http://0.0.0.0:${port}/ (admin endpoint: /api /metrics /health /ready)`,
    );
    const hosts = ['127.0.0.1', otherAddress()].filter((h): h is string => h !== undefined);
    for (const host of hosts) {
      const base = `http://${host}:${port}`;
      for (const p of [
        '/',
        '/api/session',
        '/api/servers',
        '/api/servers/unity-relay',
        '/api/wire/unity-relay',
        '/api/stream',
        '/metrics',
        '/assets/vendor/uplot/uPlot.min.css',
      ]) {
        for (const headers of [
          {},
          { authorization: 'Bearer wrong' },
          { cookie: 'gamewire_admin=wrong' },
        ] as Record<string, string>[]) {
          const r = await fetch(base + p, { headers: { ...headers, origin: 'http://evil.example' } });
          expect(r.status, `${host} ${p}`).toBe(401);
          expectNoCors(r);
          const body = await r.text();
          expect(Object.keys(JSON.parse(body))).toEqual(['error']);
          expect(body).not.toMatch(/unity-relay|actionToken|gamewire_/);
        }
      }
      expect((await fetch(`${base}/?token=wrong`)).status).toBe(401);
      // Probes carry no data and stay open.
      expect((await fetch(`${base}/health`)).status).toBe(200);
      expect((await fetch(`${base}/ready`)).status).toBe(200);
      // With the token: the data.
      const auth = { authorization: `Bearer ${TOKEN}` };
      const servers = await fetch(`${base}/api/servers`, {
        headers: { ...auth, origin: 'http://evil.example' },
      });
      expect(servers.status).toBe(200);
      expectNoCors(servers);
      expect(((await servers.json()) as any).servers[0].protocol).toBe('unity-relay');
      const session = (await (await fetch(`${base}/api/session`, { headers: auth })).json()) as any;
      // The action token is its own random value: the page's scripts hold it, never the admin token.
      expect(session.actionToken).not.toBe(TOKEN);
      expect(JSON.stringify(session)).not.toContain(TOKEN);
      expect((await fetch(`${base}/metrics`, { headers: auth })).status).toBe(200);
      // The browser login: the token once in the URL becomes an HttpOnly cookie.
      const login = await fetch(`${base}/?token=${TOKEN}`, { redirect: 'manual' });
      expect(login.status).toBe(303);
      expect(login.headers.get('location')).toBe('/');
      const cookie = login.headers.get('set-cookie')!;
      expect(cookie).toBe(`gamewire_admin=${TOKEN}; HttpOnly; SameSite=Strict; Path=/`);
      const withCookie = await fetch(`${base}/api/servers`, { headers: { cookie: cookie.split(';')[0]! } });
      expect(withCookie.status).toBe(200);
      // Actions: POST only, with the action token.
      const action = `${base}/api/servers/unity-relay/allocations/00000000-0000-4000-8000-000000000000/end`;
      expect((await fetch(action, { headers: auth })).status).toBe(405);
      expect((await fetch(action, { method: 'POST', headers: auth })).status).toBe(403);
      expect((await fetch(action, { method: 'POST' })).status).toBe(401);
      expect(
        (await fetch(action, { method: 'POST', headers: { ...auth, 'x-gamewire-action': TOKEN } })).status,
      ).toBe(403);
      const acted = await fetch(action, {
        method: 'POST',
        headers: { ...auth, 'x-gamewire-action': session.actionToken },
      });
      expect(acted.status).toBe(404); // acted on: no such allocation
    }
  });

  it('refuses a short token (exit 2, naming the flag), and accepts any characters in a long one', async () => {
    const r = runCli(['serve', 'unity-relay', '--admin-token', 'short', '--port', '0', '--api-port', '0']);
    expect(r.code).toBe(2);
    expect(errorOf(r).message).toMatch(/--admin-token must be at least 16 characters/);
    const odd = 'odd token; with=signs & spaces';
    const { lines } = await serve(['--admin-token', odd]);
    const base = `http://127.0.0.1:${adminPort(lines)}`;
    const login = await fetch(`${base}/?token=${encodeURIComponent(odd)}`, { redirect: 'manual' });
    expect(login.status).toBe(303);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    expect((await fetch(`${base}/api/servers`, { headers: { cookie } })).status).toBe(200);
    expect((await fetch(`${base}/api/servers`, { headers: { authorization: `Bearer ${odd}` } })).status).toBe(
      200,
    );
  });

  it('on loopback (the default): open, but only to requests naming this machine', async () => {
    const [{ lines }, off] = await Promise.all([serve([]), serve(['--no-admin'])]);
    const port = adminPort(lines);
    expect(lines).toContain(
      `gamewire: dashboard http://127.0.0.1:${port}/ (admin endpoint: /api /metrics /health /ready)`,
    );
    const base = `http://127.0.0.1:${port}`;
    expect((await fetch(`${base}/api/servers`)).status).toBe(200);
    expect((await getWithHost(port, '/api/servers', `localhost:${port}`)).status).toBe(200);
    const rebound = await getWithHost(port, '/api/servers', `evil.example:${port}`);
    expect(rebound.status).toBe(403);
    expect(Object.keys(JSON.parse(rebound.body) as object)).toEqual(['error']);
    expect((await getWithHost(port, '/', 'evil.example')).status).toBe(403);
    // Names that only start like a loopback address are somebody else's (DNS rebinding).
    for (const host of [`127.0.0.1.evil.example:${port}`, `127.evil.example`, `localhost.evil.example`]) {
      expect((await getWithHost(port, '/api/servers', host)).status, host).toBe(403);
    }
    for (const host of [`[::1]:${port}`, `127.8.9.10:${port}`, `LOCALHOST:${port}`]) {
      expect((await getWithHost(port, '/api/servers', host)).status, host).toBe(200);
    }
    // Fetch metadata: another site's requests reach no API (reading the wire would arm the tap);
    // a navigation to the page from a link elsewhere still works.
    for (const p of ['/api/servers', '/api/wire/unity-relay', '/api/stream?wire=unity-relay', '/metrics']) {
      for (const site of ['cross-site', 'same-site']) {
        const r = await getWithHost(port, p, `127.0.0.1:${port}`, { 'sec-fetch-site': site });
        expect(r.status, `${p} ${site}`).toBe(403);
        expect(Object.keys(JSON.parse(r.body) as object)).toEqual(['error']);
      }
    }
    expect(
      (await getWithHost(port, '/', `127.0.0.1:${port}`, { 'sec-fetch-site': 'cross-site' })).status,
    ).toBe(200);
    expect(
      (await getWithHost(port, '/api/servers', `127.0.0.1:${port}`, { 'sec-fetch-site': 'same-origin' }))
        .status,
    ).toBe(200);
    // The action token comes from /api/session; without it, no action.
    const { actionToken } = (await (await fetch(`${base}/api/session`)).json()) as { actionToken: string };
    expect(actionToken.length).toBeGreaterThanOrEqual(24);
    const action = `${base}/api/servers/unity-relay/allocations/00000000-0000-4000-8000-000000000000/end`;
    expect((await fetch(action, { method: 'POST' })).status).toBe(403);
    expect(
      (await fetch(action, { method: 'POST', headers: { 'x-gamewire-action': actionToken } })).status,
    ).toBe(404);
    expect(off.lines.some((l) => l.includes('gamewire: dashboard'))).toBe(false);
  });
});
