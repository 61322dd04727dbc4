/**
 * The package as a user gets it, made once per test run and shared by every test file that needs
 * it: the working tree (every file git tracks or would track, as a fresh clone has them) is
 * copied to a scratch folder and packed there with `npm pack` (so its prepack build never touches
 * this checkout's dist/), then the tarball is installed into an empty folder with install scripts
 * disabled (`npm install --ignore-scripts`), dependencies from npm's cache where it has them.
 *
 * The first test file to ask does the work under a lock (a directory only one process can
 * create); the others wait for its result file. global-setup.ts provides the run's folder.
 */
import { type ChildProcess, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { ROOT, runChild } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Runs a command to its end (stdin closed, output collected); rejects on a non-zero exit with
 * what it printed. Used instead of execFile so no pipe to the child outlives it.
 */
export async function runCommand(
  cmd: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<{ stdout: string; stderr: string }> {
  const { code, signal, stdout, stderr } = await runChild(cmd, args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    timeoutMs: options.timeoutMs ?? 600_000,
  });
  if (code === 0) return { stdout, stderr };
  throw Object.assign(new Error(`${cmd} ${args.join(' ')} exited ${code ?? signal}`), { stdout, stderr });
}

declare module 'vitest' {
  export interface ProvidedContext {
    packDir: string;
  }
}

export interface Packed {
  /** The .tgz `npm pack` wrote. */
  tarball: string;
  /** Every path in the tarball, as `npm pack --json` lists it (relative to the package). */
  files: string[];
  /** The folder the tarball was installed into (a user's project). */
  app: string;
  /** The installed package: app/node_modules/gamewire. */
  pkg: string;
}

/**
 * What a user's shell has: the pinned Node (the one running the tests) first on PATH, so `npm`
 * and `npx` run on it, and npm quiet about updates and funding.
 */
export function userEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ''}`,
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
    NO_COLOR: '1',
    ...extra,
  };
}

/**
 * Whether a program is installed. Under CI=true a missing program fails the test that needs it
 * (CI installs every one, .ci/run); elsewhere the test says what it did not check.
 */
export function needProgram(name: string): boolean {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' }).status === 0;
  if (!found && process.env.CI === 'true') throw new Error(`${name} is required in CI but is not installed`);
  return found;
}

/** SIGTERM (to its process group when it leads one), then waits for the exit; SIGKILL after 20 s. */
export async function stopChild(child: ChildProcess, group = false): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const signal = (s: NodeJS.Signals) => {
    try {
      if (group && child.pid !== undefined) process.kill(-child.pid, s);
      else child.kill(s);
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  const timer = setTimeout(() => signal('SIGKILL'), 20_000);
  await exited;
  clearTimeout(timer);
}

async function trackedFiles(): Promise<string[]> {
  const { stdout } = await runCommand(
    'git',
    ['ls-files', '-z', '--cached', '--others', '--exclude-standard'],
    {
      cwd: ROOT,
    },
  );
  return stdout.split('\0').filter((f) => f !== '' && existsSync(path.join(ROOT, f)));
}

async function build(base: string): Promise<Packed> {
  // 1. A fresh clone of the working tree, sharing this checkout's node_modules (npm ci's result).
  const clone = path.join(base, 'clone');
  for (const file of await trackedFiles()) {
    mkdirSync(path.dirname(path.join(clone, file)), { recursive: true });
    cpSync(path.join(ROOT, file), path.join(clone, file));
  }
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(clone, 'node_modules'), 'dir');

  // 2. npm pack: prepack builds dist/ and the prebuilt addons, postpack cleans up.
  const out = path.join(base, 'tarball');
  mkdirSync(out);
  const pack = await runCommand('npm', ['pack', '--json', '--pack-destination', out], {
    cwd: clone,
    env: userEnv(),
  });
  const [info] = JSON.parse(pack.stdout) as { filename: string; files: { path: string }[] }[];
  const tarball = path.join(out, info!.filename);

  // 3. A user's empty project, and the tarball installed into it without install scripts.
  const app = path.join(base, 'app');
  mkdirSync(app);
  writeFileSync(
    path.join(app, 'package.json'),
    '{ "name": "gamewire-user", "private": true, "type": "module" }\n',
  );
  await runCommand(
    'npm',
    ['install', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund', tarball],
    {
      cwd: app,
      env: userEnv(),
    },
  );
  return {
    tarball,
    files: info!.files.map((f) => f.path).sort(),
    app,
    pkg: path.join(app, 'node_modules', 'gamewire'),
  };
}

function runFolder(): string {
  try {
    return inject('packDir');
  } catch {
    return mkdtempSync(path.join(tmpdir(), 'gamewire-pack-'));
  }
}

let mine: Promise<Packed> | undefined;

/** The packed and installed package of this test run (made by the first caller, shared after). */
export function packedInstall(): Promise<Packed> {
  mine ??= (async () => {
    const base = runFolder();
    const result = path.join(base, 'result.json');
    const failed = path.join(base, 'failed.txt');
    let owner = true;
    try {
      mkdirSync(path.join(base, 'lock'));
    } catch {
      owner = false;
    }
    if (owner) {
      try {
        const packed = await build(base);
        // Written whole, then renamed: a waiting reader never sees half of it.
        writeFileSync(`${result}.tmp`, JSON.stringify(packed));
        renameSync(`${result}.tmp`, result);
        return packed;
      } catch (err) {
        const e = err as Error & { stderr?: string; stdout?: string };
        const text = `${e.message}\n${e.stderr ?? ''}`;
        writeFileSync(`${failed}.tmp`, text);
        renameSync(`${failed}.tmp`, failed);
        throw new Error(`packing or installing the package failed: ${text}`);
      }
    }
    // Another test file is packing: wait for its result (or its failure).
    await waitFor(
      () => {
        if (existsSync(failed))
          throw new Error(`packing or installing the package failed: ${readFileSync(failed, 'utf8')}`);
        return existsSync(result);
      },
      { what: 'another test file to pack the package', timeoutMs: 900_000, intervalMs: 250 },
    );
    return JSON.parse(readFileSync(result, 'utf8')) as Packed;
  })();
  return mine;
}
