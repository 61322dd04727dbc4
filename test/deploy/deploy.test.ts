/**
 * deploy/: the systemd unit passes `systemd-analyze verify`, and the Docker image builds where a
 * Docker engine runs. Neither is one of the real components CI must provide: where a tool is
 * missing, the test says which part it did not run and why, and still checks what it can
 * without it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

function available(cmd: string, args: string[]): { ok: boolean; why: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 20_000 });
  if (r.error !== undefined) return { ok: false, why: `${cmd} is not installed` };
  if (r.status !== 0)
    return { ok: false, why: `${cmd} ${args.join(' ')}: ${(r.stderr || r.stdout).trim().split('\n').pop()}` };
  return { ok: true, why: '' };
}

describe('deploy/gamewire.service', () => {
  const unit = readFileSync(path.join(ROOT, 'deploy/gamewire.service'), 'utf8');

  it('runs `gamewire serve` with a config and a state folder, stops on SIGTERM, never restarts a bad config', () => {
    expect(unit).toMatch(
      /^ExecStart=\/opt\/gamewire\/node_modules\/\.bin\/node \/opt\/gamewire\/bin\/gamewire\.js serve --config /m,
    );
    expect(unit).toMatch(/^KillSignal=SIGTERM$/m);
    expect(unit).toMatch(/^RestartPreventExitStatus=2$/m);
    expect(unit).toMatch(/^StateDirectory=gamewire$/m);
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

describe('deploy/Dockerfile', () => {
  const dockerfile = readFileSync(path.join(ROOT, 'deploy/Dockerfile'), 'utf8');

  it('copies only files that exist and runs the CLI as a non-root user', () => {
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) =>
      m[1]!.split(/\s+/),
    );
    expect(sources.length).toBeGreaterThan(0);
    for (const s of sources) expect(existsSync(path.join(ROOT, s)), s).toBe(true);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/^ENTRYPOINT \["node", "bin\/gamewire\.js"\]$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK .*\n.*\/ready/m);
  });

  it('builds an image where a Docker engine runs', (ctx) => {
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
        timeout: 600_000,
      });
      const version = execFileSync('docker', ['run', '--rm', tag, '--version'], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(version.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    } finally {
      spawnSync('docker', ['rmi', '-f', tag]);
    }
  }, 900_000);
});
