/**
 * The CLI's last resort: an error thrown where no command catches it (an event handler of a
 * long-running command, a promise rejected with nobody waiting) ends the real process with the
 * documented error line and exit 1, never Node's stack trace. The fault is injected into the
 * real `gamewire` process with `node --import` (a module that throws once the command runs).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, cliEnv, ROOT, runChild } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-last-resort-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `serve js5` with `fault` (JavaScript) run 300 ms after the process starts listening. */
function serveWithFault(
  fault: string,
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  // Fires once the CLI has printed its first listen line (the command is running by then).
  const inject = `const w = process.stdout.write.bind(process.stdout); let armed = false;
process.stdout.write = (chunk, ...rest) => {
  if (!armed && String(chunk).startsWith('gamewire: ')) { armed = true; setTimeout(() => { ${fault} }, 300); }
  return w(chunk, ...rest);
};`;
  return runChild(
    process.execPath,
    [
      '--import',
      `data:text/javascript,${encodeURIComponent(inject)}`,
      BIN,
      'serve',
      'js5',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--no-admin',
      '--log-level',
      'silent',
      '--data-dir',
      dir,
    ],
    { cwd: ROOT, env: cliEnv(env), timeoutMs: 60_000, endOn: 'exit' },
  );
}

const stackLine = /^\s+at .+[:(]\d+/m;

describe('the last-resort error handler', { timeout: 90_000 }, () => {
  it('an exception thrown in an event handler: one error line, exit 1, no stack trace', async () => {
    const r = await serveWithFault("throw new TypeError('boom in a handler')");
    expect(r.code, r.stderr).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    const { error } = JSON.parse(lines[0]!) as { error: { code: string; message: string } };
    expect(error.code).toBe('ERR_INTERNAL');
    expect(error.message).toMatch(/^unexpected TypeError: boom in a handler \(a bug in gamewire/);
    expect(r.stderr).not.toMatch(stackLine);
  });

  it('a promise rejected with nobody waiting: one error line, exit 1, no stack trace', async () => {
    const r = await serveWithFault("Promise.reject(new RangeError('nobody waited'))");
    expect(r.code, r.stderr).toBe(1);
    const { error } = JSON.parse(r.stderr.trim()) as { error: { code: string; message: string } };
    expect(error).toMatchObject({ code: 'ERR_INTERNAL' });
    expect(error.message).toMatch(/nobody waited/);
    expect(r.stderr).not.toMatch(stackLine);
  });

  it('a gamewire error that escaped keeps its own code and message', async () => {
    const errors = pathToFileURL(path.join(ROOT, 'dist/src/wire/errors.js')).href;
    const r = await serveWithFault(
      `import('${errors}').then(({ GamewireError }) => { throw new GamewireError('ERR_RELAY_NOT_BOUND', 'escaped'); })`,
    );
    expect(r.code).toBe(1);
    const { error } = JSON.parse(r.stderr.trim()) as { error: { code: string; message: string } };
    expect(error.code).toBe('ERR_RELAY_NOT_BOUND');
    expect(error.message).toMatch(/^escaped \(a bug in gamewire/);
  });

  it('GAMEWIRE_DEBUG=1 adds the stack to the line (for bug reports), still one JSON line', async () => {
    const r = await serveWithFault("throw new Error('with stack')", { GAMEWIRE_DEBUG: '1' });
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    const { error } = JSON.parse(lines[0]!) as { error: { stack?: string } };
    expect(error.stack).toMatch(/Error: with stack\n\s+at /);
  });
});
