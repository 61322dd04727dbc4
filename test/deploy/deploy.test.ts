/**
 * deploy/: the container image and the systemd unit, checked against the package.
 *
 * No Docker engine runs where the tests run, so the Dockerfile is checked statically, and its
 * runtime is reproduced with the real parts: the image's runtime stage holds the unpacked `npm
 * pack` tarball (the same one packed.ts installs), so its command, ENTRYPOINT + CMD, runs from
 * that installed package inside a network namespace of its own (`unshare -n`, where every
 * default port is free, as in a container) and the HEALTHCHECK command runs against it there.
 * Every port `serve` binds by default, per the registry's server definitions and as it really
 * binds them (with TCP or UDP), must be EXPOSEd, and nothing else. Where a Docker engine does
 * run, the image is also built and started.
 */

import { execFileSync, spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { SERVE_OPTIONS, sectionOptions } from '../../src/core/config.js';
import { loadProtocols } from '../../src/protocols/registry.js';
import { PORT_OFFSETS } from '../../src/protocols/unity-relay/options.js';
import { ROOT } from '../helpers/cli.js';
import { needProgram, type Packed, packedInstall } from '../library/packed.js';

function available(cmd: string, args: string[]): { ok: boolean; why: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 20_000 });
  if (r.error !== undefined) return { ok: false, why: `${cmd} is not installed` };
  if (r.status !== 0)
    return { ok: false, why: `${cmd} ${args.join(' ')}: ${(r.stderr || r.stdout).trim().split('\n').pop()}` };
  return { ok: true, why: '' };
}

// ---- the Dockerfile, parsed --------------------------------------------------------------------

interface Instruction {
  op: string;
  args: string;
  stage: number;
}

function parseDockerfile(text: string): Instruction[] {
  const joined = text
    .split('\n')
    .filter((l) => !/^\s*#/.test(l))
    .join('\n')
    .replaceAll(/\\\n/g, ' ');
  const out: Instruction[] = [];
  let stage = -1;
  for (const line of joined.split('\n')) {
    const m = /^\s*([A-Z]+)\s+(.*\S)\s*$/.exec(line);
    if (m === null) continue;
    if (m[1] === 'FROM') stage++;
    out.push({ op: m[1]!, args: m[2]!.replaceAll(/\s+/g, ' '), stage });
  }
  return out;
}

const DOCKERFILE = readFileSync(path.join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
const steps = parseDockerfile(DOCKERFILE);
const lastStage = Math.max(...steps.map((s) => s.stage));
const runtime = steps.filter((s) => s.stage === lastStage);
const build = steps.filter((s) => s.stage === 0);
const one = (list: Instruction[], op: string) => {
  const found = list.filter((s) => s.op === op);
  expect(found, op).toHaveLength(1);
  return found[0]!.args;
};
const json = (args: string) => JSON.parse(args) as string[];
const pkgJson = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  files: string[];
  devDependencies: Record<string, string>;
};

/** Every default port of every server, from the registry's definitions (and serve's admin port). */
async function defaultPorts(): Promise<number[]> {
  const ports = new Set<number>();
  for (const p of await loadProtocols()) {
    if (p.server === undefined) continue;
    for (const o of sectionOptions(p.server.defaultPort, p.server.options))
      if (
        o.type === 'int' &&
        (o.key === 'port' || /Port$/.test(o.key)) &&
        typeof o.default === 'number' &&
        o.default > 0
      )
        ports.add(o.default);
  }
  // unity-relay's DTLS/WS/WSS and API ports have no default of their own: they follow --port.
  const relay = (await loadProtocols()).find((p) => p.name === 'unity-relay')!;
  const relayPort = sectionOptions(relay.server!.defaultPort, relay.server!.options).find(
    (o) => o.key === 'port',
  )!.default as number;
  for (const offset of Object.values(PORT_OFFSETS)) ports.add(relayPort + offset);
  const admin = SERVE_OPTIONS.find((o) => o.key === 'adminPort')!.default as number;
  ports.add(admin);
  return [...ports].sort((a, b) => a - b);
}

const exposed = one(runtime, 'EXPOSE')
  .split(' ')
  .map((e) => {
    const m = /^(\d+)\/(tcp|udp)$/.exec(e);
    expect(m, `EXPOSE ${e} names its protocol`).not.toBeNull();
    return `${m![1]}/${m![2]}`;
  })
  .sort();

describe('deploy/Dockerfile, statically', () => {
  it('builds from the pinned Node: every stage FROM node:<devDependencies.node>', () => {
    const arg = /^ARG NODE_IMAGE=(\S+)$/m.exec(DOCKERFILE);
    expect(arg?.[1]).toBe(`node:${pkgJson.devDependencies.node}-bookworm-slim`);
    const froms = steps.filter((s) => s.op === 'FROM').map((s) => s.args);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the Dockerfile's own ${ARG} syntax
    expect(froms).toEqual(['${NODE_IMAGE} AS build', '${NODE_IMAGE}']);
  });

  it('packs the package in the build stage from a context that holds every file of a clone', () => {
    expect(build.map((s) => `${s.op} ${s.args}`)).toEqual(
      expect.arrayContaining([
        'COPY . .',
        'RUN npm ci --ignore-scripts --no-audit --no-fund',
        expect.stringMatching(
          /^RUN GAMEWIRE_PREBUILDS="linux-\$\(node -p process\.arch\)" npm pack --pack-destination \/tmp && mkdir \/package && tar -xzf \/tmp\/gamewire-\*\.tgz -C \/package --strip-components=1$/,
        ),
      ]),
    );
    // .dockerignore may leave out only what is generated or local: no file git tracks.
    const ignore = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'));
    const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' })
      .split('\n')
      .filter(Boolean);
    for (const pattern of ignore) {
      const re = new RegExp(
        `^${pattern.replaceAll('.', '\\.').replaceAll('**', '\u0000').replaceAll('*', '[^/]*').replaceAll('\u0000', '.*')}(?:/.*)?$`,
      );
      expect(
        tracked.filter((f) => re.test(f)),
        `.dockerignore "${pattern}" leaves out tracked files`,
      ).toEqual([]);
    }
  });

  it('runs the unpacked tarball with its production dependencies as a non-root user', () => {
    const ops = runtime.map((s) => `${s.op} ${s.args}`);
    expect(ops).toEqual(
      expect.arrayContaining([
        'WORKDIR /opt/gamewire',
        'COPY --from=build /package/ ./',
        'COPY package-lock.json ./',
        'RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force',
        'COPY deploy/docker-entrypoint.sh /usr/local/bin/gamewire-entrypoint',
        'USER node',
        'VOLUME /var/lib/gamewire',
        'STOPSIGNAL SIGTERM',
      ]),
    );
    // What the runtime copies from the build context: the lock and the entrypoint, nothing else.
    const fromContext = runtime.filter((s) => s.op === 'COPY' && !s.args.startsWith('--from='));
    expect(fromContext.map((s) => s.args.split(' ')[0])).toEqual([
      'package-lock.json',
      'deploy/docker-entrypoint.sh',
    ]);
    for (const s of fromContext) expect(existsSync(path.join(ROOT, s.args.split(' ')[0]!))).toBe(true);
    // The state folder is the working directory, after USER.
    const order = ops.indexOf('USER node');
    expect(ops.slice(order)).toContain('WORKDIR /var/lib/gamewire');
    expect(json(one(runtime, 'ENTRYPOINT'))).toEqual(['/usr/local/bin/gamewire-entrypoint']);
    expect(json(one(runtime, 'CMD'))).toEqual(['serve']);
  });

  it('has an executable entrypoint script that sh accepts', () => {
    const script = path.join(ROOT, 'deploy', 'docker-entrypoint.sh');
    accessSync(script, constants.X_OK);
    const r = spawnSync('sh', ['-n', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(readFileSync(script, 'utf8')).toMatch(/^exec node \/opt\/gamewire\/bin\/gamewire\.js "\$@"$/m);
  });

  it('EXPOSEs each default port of each server in the registry, and no other', async () => {
    const numbers = [...new Set(exposed.map((e) => Number(e.split('/')[0])))].sort((a, b) => a - b);
    expect(numbers).toEqual(await defaultPorts());
  });

  it('checks health on the admin endpoint /health, at the admin port', () => {
    const hc = /^HEALTHCHECK (.*) CMD (\[.*\])$/m.exec(DOCKERFILE.replaceAll(/\\\n\s*/g, ''));
    expect(hc).not.toBeNull();
    const command = json(hc![2]!);
    expect(command.slice(0, 2)).toEqual(['node', '-e']);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the health check's own JavaScript template
    expect(command[2]).toContain('http://127.0.0.1:${process.env.GAMEWIRE_ADMIN_PORT || 9100}/health');
    expect(SERVE_OPTIONS.find((o) => o.key === 'adminPort')!.default).toBe(9100);
  });
});

// ---- the image's command, run from the packed package in a network namespace ------------------

/** Whether this machine lets us create a network namespace (CI must). */
function canUnshare(): boolean {
  if (!needProgram('unshare') || !needProgram('ip')) return false;
  const r = spawnSync('unshare', ['-n', 'true'], { encoding: 'utf8' });
  if (r.status !== 0 && process.env.CI === 'true')
    throw new Error(`unshare -n is required in CI: ${r.stderr.trim()}`);
  return r.status === 0;
}

interface SimResult {
  stdout: string;
  stderr: string;
  ready: boolean;
  healthcheck: number | null;
  exit: number | string | null;
  error?: string;
}

let packed: Packed;
beforeAll(async () => {
  packed = await packedInstall();
}, 900_000);

/** ENTRYPOINT + CMD as the container runs them, from the installed package, in a new netns. */
function runImageCommand(env: Record<string, string | null>): SimResult {
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-container-'));
  try {
    const entrypoint = path.join(dir, 'gamewire-entrypoint');
    writeFileSync(
      entrypoint,
      readFileSync(path.join(ROOT, 'deploy', 'docker-entrypoint.sh'), 'utf8').replaceAll(
        '/opt/gamewire',
        packed.pkg,
      ),
    );
    const hc = json(/^HEALTHCHECK .* CMD (\[.*\])$/m.exec(DOCKERFILE.replaceAll(/\\\n\s*/g, ''))![1]!);
    const job = {
      command: ['sh', entrypoint, ...json(one(runtime, 'CMD'))],
      healthcheck: hc,
      cwd: dir, // WORKDIR /var/lib/gamewire: serve's ./data lands there
      env: {
        PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ''}`,
        NODE_ENV: 'production',
        // Not set in a container: the defaults apply (null removes a variable the tests set).
        GAMEWIRE_ADMIN_PORT: null,
        GAMEWIRE_DATAPLANE: null,
        ...env,
      },
      readyUrl: 'http://127.0.0.1:9100/ready',
      readyTimeoutMs: 180_000,
    };
    const r = spawnSync(
      'unshare',
      ['-n', process.execPath, path.join(ROOT, 'test', 'deploy', 'container-sim.mjs'), JSON.stringify(job)],
      { encoding: 'utf8', timeout: 300_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as SimResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `gamewire: <protocol> <transport> <host>:<port> …` lines and the `gamewire: dashboard
 * http://<host>:<port>/ …` line, as `port/tcp|udp` with their host.
 */
function bound(stdout: string): { port: string; host: string; what: string }[] {
  const servers = [...stdout.matchAll(/^gamewire: (\S+) (tcp|udp|http) (\S+):(\d+)\b/gm)].map((m) => ({
    port: `${m[4]}/${m[2] === 'udp' ? 'udp' : 'tcp'}`,
    host: m[3]!,
    what: `${m[1]} ${m[2]}`,
  }));
  const dashboard = [...stdout.matchAll(/^gamewire: dashboard http:\/\/([^\s/]+):(\d+)\//gm)].map((m) => ({
    port: `${m[2]}/tcp`,
    host: m[1]!,
    what: 'dashboard',
  }));
  return [...servers, ...dashboard];
}

describe('the image command (ENTRYPOINT + CMD), run from the packed package in a network namespace', () => {
  it('with an admin token and an API key: every EXPOSEd port is bound on all interfaces, and only those; the health check passes', (ctx) => {
    if (!canUnshare()) {
      ctx.annotate('unshare -n is not allowed here: the image command was not run');
      return;
    }
    const r = runImageCommand({
      GAMEWIRE_ADMIN_TOKEN: 'container-admin-token-0123456789',
      GAMEWIRE_UNITY_RELAY_API_KEY: 'container-api-key-0123456789',
    });
    expect(r.error).toBeUndefined();
    expect(r.ready, `${r.stdout}\n${r.stderr}`).toBe(true);
    expect(r.healthcheck).toBe(0);
    const ports = bound(r.stdout);
    expect([...new Set(ports.map((p) => p.port))].sort()).toEqual(exposed);
    expect(ports.filter((p) => p.host !== '0.0.0.0')).toEqual([]);
    expect(r.stdout).toContain('native data plane');
    expect(r.exit).toBe(0);
  }, 400_000);

  it('without them: the dashboard and the allocation API stay on the container loopback, and the health check still passes', (ctx) => {
    if (!canUnshare()) {
      ctx.annotate('unshare -n is not allowed here: the image command was not run');
      return;
    }
    const r = runImageCommand({});
    expect(r.ready, `${r.stdout}\n${r.stderr}`).toBe(true);
    expect(r.healthcheck).toBe(0);
    const loopback = bound(r.stdout)
      .filter((p) => p.host === '127.0.0.1')
      .map((p) => p.port)
      .sort();
    expect(loopback).toEqual(['37080/tcp', '9100/tcp']);
    expect(r.exit).toBe(0);
  }, 400_000);
});

describe('deploy/Dockerfile with a Docker engine', () => {
  it('builds an image and runs its CLI where a Docker engine runs', (ctx) => {
    const engine = available('docker', ['info', '--format', '{{.ServerVersion}}']);
    if (!engine.ok) {
      console.warn(`deploy: docker build not run: ${engine.why}`);
      ctx.annotate(`docker build not run: ${engine.why}`);
      return;
    }
    const tag = `gamewire-test:${process.pid}`;
    try {
      execFileSync('docker', ['build', '-f', 'deploy/Dockerfile', '-t', tag, '.'], {
        cwd: ROOT,
        stdio: 'pipe',
        timeout: 900_000,
      });
      const version = execFileSync('docker', ['run', '--rm', tag, '--version'], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(version.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    } finally {
      spawnSync('docker', ['rmi', '-f', tag]);
    }
  }, 1_000_000);
});

// ---- the systemd unit ----------------------------------------------------------------------------

describe('deploy/gamewire.service', () => {
  const unit = readFileSync(path.join(ROOT, 'deploy/gamewire.service'), 'utf8');
  const exec = /^ExecStart=(.*)$/m.exec(unit)![1]!.split(/\s+/);

  it('runs `gamewire serve` with a config and a state folder, stops on SIGTERM, never restarts a bad config', () => {
    expect(exec.slice(0, 3)).toEqual([
      '/opt/gamewire/node_modules/.bin/node',
      '/opt/gamewire/bin/gamewire.js',
      'serve',
    ]);
    expect(unit).toMatch(/^KillSignal=SIGTERM$/m);
    expect(unit).toMatch(/^RestartPreventExitStatus=2$/m);
    expect(unit).toMatch(/^StateDirectory=gamewire$/m);
  });

  it('passes only flags `gamewire serve` knows, under their current names', () => {
    const help = spawnSync(process.execPath, [path.join(ROOT, 'bin', 'gamewire.js'), 'serve', '--help'], {
      encoding: 'utf8',
    }).stdout;
    const flags = exec.filter((a) => a.startsWith('--'));
    expect(flags).toContain('--config');
    // Listed as an option of its own (a former name is only mentioned in a description).
    for (const flag of flags) expect(help, flag).toMatch(new RegExp(`^ {2}(?:-\\w, )?${flag}\\b`, 'm'));
  });

  it('passes systemd-analyze verify (paths pointed at this checkout)', (ctx) => {
    const tool = available('systemd-analyze', ['--version']);
    if (!tool.ok) {
      console.warn(`deploy: systemd-analyze verify not run: ${tool.why}`);
      ctx.annotate(`systemd-analyze verify not run: ${tool.why}`);
      return;
    }
    const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-unit-'));
    const file = path.join(dir, 'gamewire.service');
    writeFileSync(file, unit.replaceAll('/opt/gamewire', ROOT));
    const r = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8', timeout: 60_000 });
    expect(r.stderr.trim()).toBe('');
    expect(r.status).toBe(0);
  });
});
