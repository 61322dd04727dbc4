/**
 * The dashboard's static files: the page from `web/dashboard/` of the package (served at `/` and
 * `/assets/*`) and uPlot from its npm package (`/assets/vendor/uplot/*`). Works from the sources,
 * from dist/ and from an installed package. No directory listing, no path outside those folders.
 */
import { existsSync, readFileSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.map': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
};

export function contentType(file: string): string {
  return TYPES[path.extname(file).toLowerCase()] ?? 'application/octet-stream';
}

/** The folder holding gamewire's package.json (the repository or the installed package). */
export function packageRoot(from = path.dirname(fileURLToPath(import.meta.url))): string | undefined {
  let dir = from;
  for (let i = 0; i < 8; i++) {
    const pkg = path.join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'gamewire') return dir;
      } catch {
        // not ours
      }
    }
    const up = path.dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return undefined;
}

/** `web/dashboard` of the package, where the page lives. */
export function dashboardDir(): string | undefined {
  const root = packageRoot();
  return root === undefined ? undefined : path.join(root, 'web', 'dashboard');
}

/** uPlot's `dist` folder, resolved like an import would (works wherever npm put it). */
export function uplotDir(): string | undefined {
  try {
    const require = createRequire(import.meta.url);
    return path.join(path.dirname(require.resolve('uplot/package.json')), 'dist');
  } catch {
    return undefined;
  }
}

export interface StaticFile {
  body: Buffer;
  type: string;
}

/**
 * Reads `relative` (URL-decoded, `/`-separated) inside `root`, or undefined when it does not
 * exist, is not a regular file, or would leave `root` (`..`, absolute paths, NUL, backslashes).
 */
export async function readStatic(root: string, relative: string): Promise<StaticFile | undefined> {
  if (relative.includes('\0') || relative.includes('\\')) return undefined;
  const parts = relative.split('/').filter((p) => p !== '');
  if (parts.some((p) => p === '..' || p === '.' || p.startsWith('.'))) return undefined;
  const base = path.resolve(root);
  const file = path.resolve(base, ...parts);
  if (file !== base && !file.startsWith(base + path.sep)) return undefined;
  try {
    const s = await stat(file);
    if (!s.isFile()) return undefined;
    return { body: await readFile(file), type: contentType(file) };
  } catch {
    return undefined;
  }
}

/**
 * The `dashboard/` folder beside a protocol's module (`import.meta.url` of its index): the page
 * files are plain browser modules that stay in the sources (the package ships them from
 * `src/protocols/<name>/dashboard/`), so a module running from `dist/` finds them under the same
 * path in the package root. A plug-in outside the package gets the folder beside its module.
 */
export function protocolPageDir(moduleUrl: string): string {
  const here = path.dirname(fileURLToPath(moduleUrl));
  const beside = path.join(here, 'dashboard');
  if (existsSync(beside)) return beside;
  const root = packageRoot(here);
  if (root !== undefined) {
    const relative = path.relative(path.join(root, 'dist'), here);
    if (!relative.startsWith('..') && !path.isAbsolute(relative))
      return path.join(root, relative, 'dashboard');
  }
  return beside;
}
