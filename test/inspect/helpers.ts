/**
 * Helpers for the inspector's tests: real programs (tcpdump, tshark), which must be present in
 * CI (a missing one fails the test there; elsewhere the test is skipped), and the CLI's output.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCli } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

/** True when `name` can run. In CI a missing program is an error, never a skip. */
export function haveProgram(name: string): boolean {
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const ok = r.status === 0 && r.stdout.trim() !== '';
  if (!ok && process.env.CI === 'true') throw new Error(`${name} is required in CI but is not installed`);
  return ok;
}

export function tempDir(prefix = 'gamewire-inspect-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/**
 * tcpdump's flags for a capture read as it is written: each packet handed over and written at once.
 * `--immediate-mode` alone left the kernel's capture buffer (2 MiB) room for a few whole-size
 * packets: tcpdump reported "packets dropped by kernel" in bursts of a few hundred datagrams on
 * loopback, idle or not, and a test's capture lacked its last messages. 32 MiB loses none.
 */
export const TCPDUMP_LIVE = ['--immediate-mode', '-B', '32768', '-U', '-n', '-s', '0'];

/** A `tcpdump -i lo -U -w FILE FILTER` run, stopped (and flushed) by `stop`. */
export class Tcpdump {
  readonly file: string;
  private readonly child: ChildProcess;
  private readonly exited: Promise<void>;

  private constructor(file: string, child: ChildProcess, exited: Promise<void>) {
    this.file = file;
    this.child = child;
    this.exited = exited;
  }

  static async start(filter: string, file: string, extra?: string[]): Promise<Tcpdump> {
    // On loopback, only 127.0.0.1 to 127.0.0.1, where every test's own client and server are:
    // other files' crowds and attackers (127.0.0.2 and up) that still reach for a port their
    // server had, which this test's server may now hold, stay out of the capture (seen under
    // load: a flow from 127.0.0.41 in an RMC capture).
    const args =
      extra === undefined
        ? [
            '-i',
            'lo',
            ...TCPDUMP_LIVE,
            '-w',
            file,
            `(${filter}) and src host 127.0.0.1 and dst host 127.0.0.1`,
          ]
        : [...extra, ...TCPDUMP_LIVE, '-w', file, filter];
    const child = spawn('tcpdump', args, {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`tcpdump did not start: ${stderr}`)), 20_000);
      child.stderr!.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (stderr.includes('listening on')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`tcpdump exited with ${code}: ${stderr}`));
      });
    });
    return new Tcpdump(file, child, exited);
  }

  /**
   * Waits for the last packets to be written (the file stops growing for a while: tcpdump may be
   * scheduled late on a loaded machine), then stops tcpdump.
   */
  async stop(settleMs = 500): Promise<Buffer> {
    let size = -1;
    let stableSince = Date.now();
    // The condition: the file has not grown for `settleMs` (a quiet period is the only sign that
    // tcpdump wrote everything; past 10 s it is stopped anyway and the test checks what it got).
    await waitFor(
      () => {
        const now = fs.existsSync(this.file) ? fs.statSync(this.file).size : 0;
        if (now !== size) {
          size = now;
          stableSince = Date.now();
          return false;
        }
        return Date.now() - stableSince >= settleMs;
      },
      { what: 'the capture file to stop growing', intervalMs: 100 },
    ).catch(() => undefined);
    this.child.kill('SIGINT');
    await this.exited;
    return fs.readFileSync(this.file);
  }

  kill(): void {
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

export interface JsonRecord {
  time: number;
  flow: string;
  transport: 'tcp' | 'udp';
  direction: 'client' | 'server';
  protocol: string;
  message?: any;
  error?: { code: string; message: string; offset: number };
}

/** `gamewire inspect FILE --json ARGS…`, parsed. */
export function inspectJson(file: string, args: string[] = []): JsonRecord[] {
  const r = runCli(['inspect', file, '--json', ...args]);
  if (r.code !== 0) throw new Error(`inspect failed (${r.code}): ${r.stderr}`);
  return r.stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as JsonRecord);
}
