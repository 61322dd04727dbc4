/**
 * The dashboard's static files: the page and its assets from web/dashboard, uPlot from its npm
 * package, with content types and cache headers; nothing outside those folders, however asked.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dashboardDir, packageRoot, uplotDir } from '../../src/core/admin/static.js';
import { ROOT } from '../helpers/cli.js';
import { type Admin, eventually, openStream, startAdmin } from './helpers.js';

let dir: string;
let admin: Admin;

/** GET with the path sent exactly as written (fetch would normalise `..`). */
function rawGet(
  port: number,
  p: string,
): Promise<{ status: number; type: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += d.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], body }));
    });
    req.on('error', reject);
  });
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'gw-web-'));
  const web = path.join(dir, 'web');
  mkdirSync(path.join(web, 'js'), { recursive: true });
  writeFileSync(path.join(web, 'index.html'), '<!doctype html><title>gamewire</title>');
  writeFileSync(path.join(web, 'js', 'app.js'), 'export const app = 1;');
  writeFileSync(path.join(web, 'style.css'), 'body{}');
  writeFileSync(path.join(web, '.secret'), 'hidden');
  writeFileSync(path.join(dir, 'outside.txt'), 'OUTSIDE');
  admin = await startAdmin([], { webDir: web });
});

afterAll(async () => {
  await admin.admin.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('static files of the admin endpoint', () => {
  it('serves the page and its assets with their content types and cache headers', async () => {
    const page = await admin.get('/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('cache-control')).toBe('no-cache');
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    expect(page.headers.get('content-security-policy')).toMatch(/frame-ancestors 'none'/);
    expect(await page.text()).toContain('<title>gamewire</title>');
    const js = await admin.get('/assets/js/app.js');
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await admin.get('/assets/style.css')).headers.get('content-type')).toBe(
      'text/css; charset=utf-8',
    );
    const uplot = await admin.get('/assets/vendor/uplot/uPlot.iife.min.js');
    expect(uplot.status).toBe(200);
    expect(uplot.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(uplot.headers.get('cache-control')).toBe('public, max-age=86400');
    expect((await uplot.text()).length).toBeGreaterThan(10_000);
    expect((await admin.get('/assets/vendor/uplot/uPlot.min.css')).headers.get('content-type')).toBe(
      'text/css; charset=utf-8',
    );
    expect((await admin.get('/assets/nope.js')).status).toBe(404);
    expect((await admin.get('/assets/js')).status).toBe(404); // no directory listing
  });

  it('never serves a file outside its folders', async () => {
    for (const p of [
      '/assets/../outside.txt',
      '/assets/../../outside.txt',
      '/assets/%2e%2e/outside.txt',
      '/assets/%2e%2e%2foutside.txt',
      '/assets/..%2f..%2foutside.txt',
      '/assets/..%5coutside.txt',
      '/assets/js/..%2f..%2f..%2foutside.txt',
      '/assets/.secret',
      '/assets/%2esecret',
      '/assets/vendor/uplot/..%2fpackage.json',
      '/assets/vendor/uplot/%2e%2e/package.json',
      '/assets/%00index.html',
      `/assets/${encodeURIComponent(path.join(dir, 'outside.txt'))}`,
      '/../../../etc/passwd',
    ]) {
      const r = await rawGet(admin.admin.port, p);
      expect(r.status, p).not.toBe(200);
      expect(r.body, p).not.toMatch(/OUTSIDE|hidden|"name": "uplot"|root:/);
    }
  });

  it('ships in the npm package: the page, the admin code, and uPlot as a runtime dependency', () => {
    const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const files = (JSON.parse(r.stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
    expect(files).toContain('web/dashboard/index.html');
    expect(files).toContain('dist/src/core/admin/server.js');
    expect(files).toContain('dist/src/core/admin/static.js');
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    expect(pkg.dependencies.uplot).toBeDefined();
  });

  it('finds the page and uPlot from the package, wherever it is installed', () => {
    expect(packageRoot()).toBeDefined();
    expect(dashboardDir()).toBe(path.join(packageRoot()!, 'web', 'dashboard'));
    expect(uplotDir()).toMatch(/uplot[\\/]dist$/);
  });
});

describe('event stream limits', () => {
  it('refuses streams beyond maxStreams, pings idle ones, and frees a slot when one closes', async () => {
    const limited = await startAdmin([], { maxStreams: 1, pingMs: 100, tickMs: 50 });
    try {
      const first = await openStream(`${limited.base}/api/stream`);
      const refused = await limited.get('/api/stream');
      expect(refused.status).toBe(503);
      expect(Object.keys((await refused.json()) as object)).toEqual(['error']);
      await eventually(() => (first.comments.includes(': ping') ? true : undefined), 5000, 'a ping');
      await eventually(() => (first.events.filter((e) => e.event === 'tick').length >= 3 ? true : undefined));
      await first.stop();
      await eventually(() => (limited.admin.streams === 0 ? true : undefined), 5000, 'the slot to free');
      const again = await openStream(`${limited.base}/api/stream`);
      expect(again.res.status).toBe(200);
      await again.stop();
    } finally {
      await limited.admin.close();
    }
  });
});
