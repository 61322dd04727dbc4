/**
 * What the dashboard's browser tests share: Debian's Chromium driven by playwright-core (a fresh
 * profile each run; missing Chromium FAILS under CI=true), a real `gamewire serve` spawned with
 * every port 0 (the admin endpoint's port is read from its printed line), and screenshots into
 * docs/images/ only when GAMEWIRE_SCREENSHOTS=1 (so test runs never dirty the tree).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { BIN, ROOT } from '../helpers/cli.js';

export const CHROMIUM = '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.CI === 'true')
  throw new Error(`${CHROMIUM} is required in CI but is not installed`);

export const SCREENSHOTS = process.env.GAMEWIRE_SCREENSHOTS === '1';

export async function launchBrowser(): Promise<{ browser: BrowserContext; close(): Promise<void> }> {
  const profile = mkdtempSync(path.join(tmpdir(), 'gamewire-dashboard-chromium-'));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    colorScheme: 'light',
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // Keep timers and animation frames running in a tab nobody looks at.
      '--disable-background-timer-throttling',
      '--disable-renderer-backgrounding',
      '--disable-backgrounding-occluded-windows',
    ],
  });
  return {
    browser,
    async close() {
      await browser.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Page errors and failed assets are collected so a test can assert the page ran cleanly. */
export function watchPage(page: Page): string[] {
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/401|403|404|409/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return problems;
}

export async function screenshot(page: Page, name: string, fullPage = false): Promise<void> {
  if (!SCREENSHOTS) return;
  const dir = path.join(ROOT, 'docs', 'images');
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, `dashboard-${name}.png`), fullPage });
}

export interface Endpoint {
  protocol: string;
  transport: string;
  host: string;
  port: number;
  description: string;
}

export interface Serve {
  child: ChildProcess;
  adminHost: string;
  adminPort: number;
  /** http://127.0.0.1:PORT (or the bound host) */
  adminUrl: string;
  endpoints: Endpoint[];
  endpoint(protocol: string, transport: string, description?: RegExp): Endpoint;
  stdout(): string;
  /** What serve wrote to stderr (its logs at warn and above). */
  stderr(): string;
  stop(): Promise<void>;
}

/**
 * Spawns `gamewire serve [protocols]` with every port 0 (a throwaway config file and data dir)
 * and resolves once the admin line is printed.
 */
export async function startServe(
  protocols: string[],
  options: {
    adminHost?: string;
    adminToken?: string;
    extraArgs?: string[];
    config?: Record<string, Record<string, unknown>>;
  } = {},
): Promise<Serve> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-dashboard-serve-'));
  const { loadProtocols } = await import('../../src/protocols/registry.js');
  const modules = (await loadProtocols()).filter((p) => p.server !== undefined);
  const config: Record<string, Record<string, unknown>> = {};
  for (const p of modules) {
    const section: Record<string, unknown> = { host: '127.0.0.1', port: 0 };
    for (const o of p.server!.options) if (/port$/i.test(o.key) && o.type === 'int') section[o.key] = 0;
    config[p.name] = { ...section, ...(options.config?.[p.name] ?? {}) };
  }
  const configFile = path.join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify(config));
  const args = [
    BIN,
    'serve',
    ...protocols,
    '--config',
    configFile,
    '--data-dir',
    dir,
    '--log-level',
    'warn',
    '--admin-port',
    '0',
  ];
  if (options.adminHost !== undefined) args.push('--admin-host', options.adminHost);
  if (options.adminToken !== undefined) args.push('--admin-token', options.adminToken);
  args.push(...(options.extraArgs ?? []));
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, GAMEWIRE_ADMIN_PORT: '0', NO_COLOR: '1' },
  });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const admin = await new Promise<{ host: string; port: number }>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`serve did not print its admin line in time\nstdout: ${out}\nstderr: ${err}`)),
      60_000,
    );
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /^gamewire: dashboard http:\/\/(\S+):(\d+)\//m.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve({ host: m[1]!, port: Number(m[2]) });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code}\nstdout: ${out}\nstderr: ${err}`));
    });
  });
  const endpoints: Endpoint[] = [];
  for (const m of out.matchAll(/^gamewire: (\S+) (\w+) (\S+):(\d+) ?(.*)$/gm)) {
    if (m[1] === 'admin' || m[1] === 'dashboard' || m[1] === 'metrics') continue;
    endpoints.push({
      protocol: m[1]!,
      transport: m[2]!,
      host: m[3]!,
      port: Number(m[4]),
      description: m[5] ?? '',
    });
  }
  const connectHost = admin.host === '0.0.0.0' || admin.host === '::' ? '127.0.0.1' : admin.host;
  return {
    child,
    adminHost: admin.host,
    adminPort: admin.port,
    adminUrl: `http://${connectHost}:${admin.port}`,
    endpoints,
    endpoint(protocol, transport, description) {
      const e = endpoints.find(
        (x) =>
          x.protocol === protocol &&
          x.transport === transport &&
          (description === undefined || description.test(x.description)),
      );
      if (e === undefined) throw new Error(`no ${protocol} ${transport} endpoint in:\n${out}`);
      return e;
    },
    stdout: () => out,
    stderr: () => err,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Spawns `gamewire <args>` (a client command such as `nox-relay bots`) and returns the process. */
export function spawnCli(args: string[]): {
  child: ChildProcess;
  output: () => string;
  stop(): Promise<void>;
} {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  return {
    child,
    output: () => out,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGINT');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
