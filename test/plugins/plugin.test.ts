/**
 * The plug-in rule (docs/ARCHITECTURE.md): everything gamewire knows about a protocol is reached
 * through its registry entry. A toy protocol from outside (test/fixtures/echo-protocol, written
 * against the public `gamewire/wire` and `gamewire/plugin` only) is added with one entry through
 * GAMEWIRE_PLUGINS, and appears in `protocols`, `decode`/`encode`, `serve`, `inspect`,
 * `dissector` (tshark decodes it with the generated Lua), `/api` and the dashboard (Chromium),
 * with no other file touched. Also: the shared code names no protocol, and package.json's
 * exports follow the registry.
 */
import { spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ipPacket, LinkType, pcapFileHeader, pcapRecord } from '../../src/inspect/writer.js';
import { registry } from '../../src/protocols/registry.js';
import { launchBrowser, type Serve, startServe, watchPage } from '../dashboard/browser-helpers.js';
import { errorOf, ROOT, runCli } from '../helpers/cli.js';
import { haveProgram, inspectJson, tempDir } from '../inspect/helpers.js';

const FIXTURE = './test/fixtures/echo-protocol/index.ts';
// Every spawned gamewire of this file (runCli, startServe) loads the plug-in. Set for this file
// only: its worker runs other files after it (test/setup.ts fails a file that leaves it set).
const pluginsBefore = process.env.GAMEWIRE_PLUGINS;
beforeAll(() => {
  process.env.GAMEWIRE_PLUGINS = FIXTURE;
});
afterAll(() => {
  if (pluginsBefore === undefined) delete process.env.GAMEWIRE_PLUGINS;
  else process.env.GAMEWIRE_PLUGINS = pluginsBefore;
});

const HAVE_TSHARK = haveProgram('tshark');

function frame(type: number, body: Buffer): Buffer {
  const m = Buffer.concat([Buffer.from([type]), body]);
  const out = Buffer.alloc(2);
  out.writeUInt16BE(m.length);
  return Buffer.concat([out, m]);
}
const say = (text: string) => {
  const len = Buffer.alloc(2);
  len.writeUInt16BE(Buffer.byteLength(text));
  return Buffer.concat([len, Buffer.from(text)]);
};
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

/** One TCP exchange: sends frames, resolves once `replyBytes` bytes of replies arrived. */
function tcpExchange(port: number, frames: Buffer[], replyBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const got: Buffer[] = [];
    let n = 0;
    socket.on('data', (d) => {
      got.push(d);
      n += d.length;
      if (n >= replyBytes) {
        socket.end();
        resolve(Buffer.concat(got));
      }
    });
    socket.on('error', reject);
    socket.on('connect', () => {
      for (const f of frames) socket.write(f);
    });
  });
}

function udpExchange(port: number, datagram: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = dgram.createSocket('udp4');
    s.on('message', (m) => {
      s.close();
      resolve(m);
    });
    s.on('error', reject);
    s.send(datagram, port, '127.0.0.1');
  });
}

describe('a protocol plugged in through one registry entry', () => {
  it('is listed by `protocols`, and `decode`/`encode` its format', () => {
    const list = runCli(['protocols']);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^echo\s+Echo: a toy protocol/m);
    const bytes = frame(1, say('hello')).toString('hex');
    const decoded = runCli(['decode', 'echo', '--hex', bytes]);
    expect(decoded.code, decoded.stderr).toBe(0);
    expect(JSON.parse(decoded.stdout)).toEqual({ type: 'Say', text: 'hello' });
    const encoded = runCli(['encode', 'echo', '--from', 'server', '-'], '{"type":"Pong","nonce":7}');
    expect(encoded.code, encoded.stderr).toBe(0);
    expect(encoded.stdout.trim()).toBe('00050200000007');
    // Its decoder's errors are typed like any other's.
    const bad = runCli(['decode', 'echo', '--hex', '0009010002']);
    expect(bad.code).toBe(1);
    expect(errorOf(bad).code).toBe('ERR_INCOMPLETE');
  });

  it('refuses a plug-in that cannot load, or that takes a taken name, with one error line (exit 2)', () => {
    const missing = spawnSync(process.execPath, ['bin/gamewire.js', 'protocols'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, GAMEWIRE_PLUGINS: './test/fixtures/no-such-plugin.js' },
    });
    expect(missing.status).toBe(2);
    expect(JSON.parse(missing.stderr).error.code).toBe('ERR_PLUGIN');
    expect(missing.stderr).toContain('no-such-plugin');
    const twice = spawnSync(process.execPath, ['bin/gamewire.js', 'protocols'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, GAMEWIRE_PLUGINS: `${FIXTURE},${FIXTURE}` },
    });
    expect(twice.status).toBe(2);
    expect(JSON.parse(twice.stderr).error.message).toMatch(/"echo" is already registered/);
    expect(twice.stderr.split('\n').filter((l) => l !== '')).toHaveLength(1);
  });

  it("`inspect` takes the plug-in's own flag from its declaration: --help, default, applied, refused", () => {
    // Say and Said over UDP, to and from the plug-in's default port.
    const client = { address: '127.0.0.1', port: 51000 };
    const server = { address: '127.0.0.1', port: 7007 };
    const udp = (from: typeof client, to: typeof client, type: number) =>
      ipPacket('udp', from, to, Buffer.concat([Buffer.from([type]), say('hi')]));
    const file = path.join(tempDir('gamewire-plugin-flag-'), 'echo.pcap');
    fs.writeFileSync(
      file,
      Buffer.concat([
        pcapFileHeader(LinkType.RAW),
        pcapRecord(1_000_000, udp(client, server, 1)),
        pcapRecord(1_000_100, udp(server, client, 1)),
      ]),
    );
    const help = runCli(['inspect', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(
      /--echo-text <form>\s+Echo: Say and Said texts shown as plain or hex\s+\(default: "plain"\)/,
    );
    // The built-in protocols' flags are still there, in registry order, before --no-detect.
    const order = [
      '--rmc-variant',
      '--access-key',
      '--prudp-checksum',
      '--js5-seeded',
      '--echo-text',
      '--no-detect',
    ];
    const at = order.map((f) => help.stdout.indexOf(f));
    expect(at.every((i) => i >= 0)).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    const texts = (args: string[]) =>
      inspectJson(file, args)
        .filter((r) => r.protocol === 'echo')
        .map((r) => `${r.transport} ${r.direction} ${r.message?.type} ${r.message?.text}`);
    expect(texts([])).toEqual(['udp client Say hi', 'udp server Said hi']);
    expect(texts(['--echo-text', 'hex'])).toEqual(['udp client Say 6869', 'udp server Said 6869']);
    const refused = runCli(['inspect', file, '--echo-text', 'base64']);
    expect(refused.code).toBe(2);
    expect(errorOf(refused)).toMatchObject({ code: 'ERR_USAGE', message: '--echo-text takes plain or hex' });
  });

  describe('served, recorded, inspected, dissected and shown', () => {
    let serve: Serve;
    let recordDir: string;
    beforeAll(async () => {
      recordDir = tempDir('gamewire-plugin-record-');
      serve = await startServe(['echo'], {
        config: { echo: { port: 0 } },
        extraArgs: ['--record', recordDir],
      });
    }, 90_000);
    afterAll(async () => {
      await serve?.stop();
    });

    it('serves TCP and UDP, and the admin API lists it with its page and declared actions', async () => {
      const tcp = serve.endpoint('echo', 'tcp');
      const udp = serve.endpoint('echo', 'udp');
      const replies = await tcpExchange(tcp.port, [frame(1, say('hello')), frame(2, u32(42))], 10 + 7);
      expect(replies.toString('hex')).toBe(
        `${frame(1, say('hello')).toString('hex')}${frame(2, u32(42)).toString('hex')}`,
      );
      const pong = await udpExchange(udp.port, Buffer.concat([Buffer.from([1]), say('over udp')]));
      expect(pong.toString('hex')).toBe(Buffer.concat([Buffer.from([1]), say('over udp')]).toString('hex'));

      const servers = (await (await fetch(`${serve.adminUrl}/api/servers`)).json()) as any;
      const echo = servers.servers.find((s: any) => s.protocol === 'echo');
      expect(echo.page).toBe('/assets/protocols/echo/page.js');
      expect(echo.actions).toEqual(['hangUp', 'forget']);
      expect(echo.actionRoutes).toEqual([
        { name: 'hangUp', collection: 'connections', verb: 'hang-up' },
        { name: 'forget', verb: 'forget' },
      ]);
      expect(echo.counters.received).toBeGreaterThanOrEqual(3);
      const page = await fetch(`${serve.adminUrl}${echo.page}`);
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      expect((await fetch(`${serve.adminUrl}/assets/protocols/echo/../index.ts`)).status).not.toBe(200);
      const detail = (await (await fetch(`${serve.adminUrl}/api/servers/echo`)).json()) as any;
      expect(detail.state.said).toBe(2);
      // A declared server-wide action, by its verb; an undeclared one is refused.
      const { actionToken } = (await (await fetch(`${serve.adminUrl}/api/session`)).json()) as any;
      const post = (p: string) =>
        fetch(`${serve.adminUrl}${p}`, { method: 'POST', headers: { 'x-gamewire-action': actionToken } });
      expect((await post('/api/servers/echo/forget')).status).toBe(200);
      expect(((await (await fetch(`${serve.adminUrl}/api/servers/echo`)).json()) as any).state.said).toBe(0);
      expect((await post('/api/servers/echo/drain')).status).toBe(409);
      expect((await post('/api/servers/echo/connections/1/disconnect')).status).toBe(404);
      expect((await post('/api/servers/echo/connections/999/hang-up')).status).toBe(404);
    });

    it('the dashboard shows its own page from its folder, and its action works (Chromium)', async () => {
      const tcp = serve.endpoint('echo', 'tcp');
      // A connection that stays open, for the page to list and hang up.
      const socket = net.connect(tcp.port, '127.0.0.1');
      const closed = new Promise<void>((r) => socket.on('close', () => r()));
      await new Promise<void>((r) => socket.on('connect', () => r()));
      socket.write(frame(1, say('stay')));
      await new Promise<void>((r) => socket.once('data', () => r()));
      const browser = await launchBrowser();
      try {
        const tab = await browser.browser.newPage();
        const problems = watchPage(tab);
        await tab.goto(`${serve.adminUrl}/#/`);
        await tab.locator('nav a[href="#/echo"]').click();
        await tab.locator('[data-testid="echo-connection-row"]').first().waitFor();
        expect(await tab.locator('[data-testid="page-title"]').innerText()).toBe('echo');
        await expect.poll(() => tab.locator('[data-testid="echo-said"]').innerText()).toMatch(/\d+ said/);
        await tab.locator('[data-testid="echo-hang-up"]').first().click();
        await tab.locator('[data-testid="confirm-ok"]').click();
        await closed;
        await expect.poll(() => tab.locator('[data-testid="echo-connection-row"]').count()).toBe(0);
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
        socket.destroy();
      }
    }, 90_000);

    it('its recorded traffic is decoded by `inspect` and by tshark with the generated dissector', async () => {
      // The recording is flushed when serve stops.
      await serve.stop();
      const files = fs.readdirSync(recordDir).filter((f) => f.endsWith('.pcapng'));
      expect(files.length).toBeGreaterThan(0);
      const capture = path.join(recordDir, files.sort()[0]!);
      const records = inspectJson(capture).filter((r) => r.protocol === 'echo');
      const shown = records.map((r) => `${r.transport} ${r.direction} ${r.message?.type}`);
      expect(shown).toEqual(
        expect.arrayContaining([
          'tcp client Say',
          'tcp server Said',
          'tcp client Ping',
          'tcp server Pong',
          'udp client Say',
          'udp server Said',
        ]),
      );
      expect(records.find((r) => r.message?.type === 'Ping')!.message.nonce).toBe(42);
      expect(records.some((r) => r.error !== undefined)).toBe(false);

      const dir = tempDir('gamewire-plugin-lua-');
      const written = runCli(['dissector', '--out', dir]);
      expect(written.code, written.stderr).toBe(0);
      expect(fs.readdirSync(dir)).toContain('gamewire-echo.lua');
      if (!HAVE_TSHARK) return;
      const r = spawnSync(
        'tshark',
        [
          '-X',
          `lua_script:${path.join(dir, 'gamewire-echo.lua')}`,
          '-o',
          'tcp.desegment_tcp_streams:TRUE',
          '-r',
          capture,
          '-T',
          'json',
          '--no-duplicate-keys',
        ],
        { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 << 20 },
      );
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).not.toMatch(/Lua: Error|error during loading|attempt to/i);
      expect(r.stdout).not.toMatch(/_ws\.malformed|_ws\.lua\.text/);
      // One line per message item: direction, message name, then its field values.
      const lines: string[] = [];
      for (const packet of JSON.parse(r.stdout) as any[]) {
        const items = packet._source.layers.gw_echo;
        if (items === undefined) continue;
        for (const item of Array.isArray(items) ? items : [items]) {
          const values: string[] = [];
          for (const [k, v] of Object.entries(item as Record<string, unknown>)) {
            if (k.startsWith('gw_echo.') && !k.includes('.hdr.') && k !== 'gw_echo.message')
              values.push(String(v));
          }
          lines.push([item['gw_echo.hdr.direction'], item['gw_echo.message'], ...values].join(' '));
        }
      }
      expect(lines).toEqual(
        expect.arrayContaining([
          'client Say hello',
          'server Said hello',
          'client Ping 42',
          'server Pong 42',
          'client Say over udp',
          'server Said over udp',
        ]),
      );
    }, 120_000);
  });
});

describe('the plug-in rule in the code', () => {
  const names = registry.map((e) => e.name);
  const protocolWords = new RegExp(`\\b(${[...names, 'nox', 'unity', 'vcmp', 'prudp'].join('|')})\\b`, 'i');

  /** A file's code with its comments (line, block, JSDoc) removed; strings stay. */
  function code(text: string): string {
    return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
  }

  function files(dir: string, ext: RegExp): string[] {
    return fs
      .readdirSync(path.join(ROOT, dir), { recursive: true, withFileTypes: true })
      .filter((d) => d.isFile() && ext.test(d.name))
      .map((d) => path.relative(ROOT, path.join(d.parentPath, d.name)));
  }

  it('src/core, src/inspect and the dashboard shell name no protocol outside comments', () => {
    const offenders: string[] = [];
    for (const f of [
      ...files('src/core', /\.ts$/),
      ...files('src/inspect', /\.ts$/),
      ...files('web/dashboard', /\.(js|html|css)$/),
    ]) {
      const lines = code(fs.readFileSync(path.join(ROOT, f), 'utf8')).split('\n');
      lines.forEach((l, i) => {
        if (protocolWords.test(l)) offenders.push(`${f}:${i + 1}: ${l.trim()}`);
      });
    }
    expect(offenders).toEqual([]);
  });

  /** The shared code of the CLI: every command but main.ts (which wires the registry in). */
  const cliFiles = () => files('src/cli', /\.ts$/).filter((f) => f !== path.join('src', 'cli', 'main.ts'));

  /** Offending lines of `list` (comments removed; `43_594` read as `43594`). */
  function offenders(list: readonly string[], pattern: RegExp): string[] {
    const out: string[] = [];
    for (const f of list) {
      const lines = code(fs.readFileSync(path.join(ROOT, f), 'utf8')).split('\n');
      lines.forEach((l, i) => {
        if (pattern.test(l.replace(/(\d)_(?=\d)/g, '$1'))) out.push(`${f}:${i + 1}: ${l.trim()}`);
      });
    }
    return out;
  }

  it("src/core, src/inspect and src/cli hold no protocol's default port, and src/cli names no protocol transport", async () => {
    // Every port a protocol owns: its server's default, its flows' and its TLS/DTLS endpoints', and
    // the ones its docs name (js5's second port, unity-relay's derived ones and its API).
    const ports = new Set([43594, 43595, 9103, 23032, 37000, 37001, 37002, 37003, 37080]);
    for (const entry of registry) {
      const m = await entry.load();
      if (m.server !== undefined) ports.add(m.server.defaultPort);
      const inspection = await entry.loadInspection?.();
      for (const f of inspection?.flows ?? []) for (const p of [...f.tcpPorts, ...f.udpPorts]) ports.add(p);
      for (const p of [...(inspection?.tlsPorts ?? []), ...(inspection?.dtlsPorts ?? [])]) ports.add(p);
    }
    const portWords = new RegExp(`\\b(${[...ports].join('|')})\\b`);
    const shared = [...files('src/core', /\.ts$/), ...files('src/inspect', /\.ts$/), ...cliFiles()];
    expect(offenders(shared, portWords)).toEqual([]);
    expect(offenders(cliFiles(), /\bprudp\b/i)).toEqual([]);
  }, 60_000);

  it("src/core, src/inspect and src/cli import nothing from a protocol's folder (only the registry)", () => {
    const shared = [
      ...files('src/core', /\.ts$/),
      ...files('src/inspect', /\.ts$/),
      ...files('src/cli', /\.ts$/),
    ];
    expect(offenders(shared, /from '(\.\.\/)+protocols\/(?!registry\.js'|plugins\.js')/)).toEqual([]);
  });

  it("package.json's exports give each built-in protocol its two library subpaths, and src/lib holds their modules", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      exports: Record<string, string>;
    };
    const protocolPaths = Object.keys(pkg.exports).filter((k) =>
      names.some((n) => k === `./${n}` || k.startsWith(`./${n}/`)),
    );
    const expected = names.flatMap((n) => [`./${n}`, `./${n}/codec`]);
    expect(protocolPaths.sort()).toEqual(expected.sort());
    for (const n of names) {
      expect(pkg.exports[`./${n}`]).toBe(`./dist/src/lib/${n}.js`);
      expect(pkg.exports[`./${n}/codec`]).toBe(`./dist/src/lib/${n}-codec.js`);
      expect(fs.existsSync(path.join(ROOT, 'src', 'lib', `${n}.ts`)), n).toBe(true);
      expect(fs.existsSync(path.join(ROOT, 'src', 'lib', `${n}-codec.ts`)), n).toBe(true);
    }
  });
});
