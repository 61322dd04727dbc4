/**
 * Every `gamewire load` and `gamewire conform` command line in README.md, docs/capacity.md and
 * docs/conform.md that names a server `npm start` starts (its default address), run verbatim
 * against that server: the test starts each server on free ports (parallel tests cannot take the
 * defaults) and substitutes the real port for the default one, nothing else. Lines with
 * placeholders (HOST:PORT, [options], …) are syntax, and a report's header line is output: neither
 * is run.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, runCliAsync } from '../helpers/cli.js';
import { type Served, startServe } from '../helpers/serve.js';

const DOCS = ['README.md', 'docs/capacity.md', 'docs/conform.md'];

interface DocCommand {
  where: string;
  line: string;
  args: string[];
}

/** The command lines of a document's code blocks (continuation lines joined). */
function commands(doc: string): DocCommand[] {
  const lines = readFileSync(path.join(ROOT, doc), 'utf8').split('\n');
  const out: DocCommand[] = [];
  let inBlock = false;
  for (let i = 0; i < lines.length; i++) {
    if (/^\s*```/.test(lines[i]!)) {
      inBlock = !inBlock;
      continue;
    }
    if (!inBlock) continue;
    const first = i;
    let text = lines[i]!;
    while (text.endsWith('\\') && i + 1 < lines.length) text = `${text.slice(0, -1)} ${lines[++i]!.trim()}`;
    const m = /(?:^|\s)(?:npx\s+)?(?:\S*\/)?gamewire(?:\.js)?\s+((?:load|conform)\s.*)$/.exec(text);
    if (m === null) continue;
    // Drop a trailing comment and an output redirection: what the shell would not pass on.
    const command = m[1]!
      .replace(/\s+#.*$/, '')
      .replace(/\s+>\s*\S+\s*$/, '')
      .trim();
    // Placeholders are syntax; a line with "(…)" after the target is a report's header, not a command.
    if (/HOST|PORT|\[|<|…|\.\.\.|\(/.test(command)) continue;
    if (/^(?:load|conform) \S+ --list/.test(command)) continue;
    out.push({ where: `${doc}:${first + 1}`, line: command, args: command.split(/\s+/) });
  }
  return out;
}

const all = DOCS.flatMap(commands);

/** The default port each command names → the server that `npm start` runs there. */
const SERVERS: Record<number, { protocol: string; args: string[]; endpoint: [string, RegExp?] }> = {
  43594: { protocol: 'js5', args: ['js5', '--port', '0'], endpoint: ['tcp'] },
  23032: { protocol: 'nox-relay', args: ['nox-relay', '--port', '0'], endpoint: ['udp'] },
};

/** The default ports a command names. */
function portsOf(c: DocCommand): number[] {
  return [...new Set([...c.line.matchAll(/127\.0\.0\.1:(\d+)/g)].map((m) => Number(m[1])))];
}

/**
 * The commands run at once, so a `load` crowd gets a server of its own (two crowds of 32 would
 * not fit the one instance of 32 a server has); the `conform` runs share one server per port
 * (a check leaves the server as it found it). Every server starts at once, and each command
 * waits for its own.
 */
const own = new Map<DocCommand, Map<number, Promise<Served>>>();
const starting: Promise<Served>[] = [];

function startFor(port: number): Promise<Served> {
  const s = SERVERS[port];
  if (s === undefined) throw new Error(`no server known for a command's port ${port}`);
  const p = startServe([...s.args, '--host', '127.0.0.1', '--no-admin'], { timeoutMs: 120_000 });
  // A start that fails fails the commands that wait for it; this only keeps it from also being
  // reported as an unhandled rejection before they do.
  p.catch(() => {});
  starting.push(p);
  return p;
}

beforeAll(() => {
  const shared = new Map<number, Promise<Served>>();
  for (const c of all) {
    const mine = new Map<number, Promise<Served>>();
    for (const port of portsOf(c)) {
      if (c.args[0] === 'load') mine.set(port, startFor(port));
      else {
        if (!shared.has(port)) shared.set(port, startFor(port));
        mine.set(port, shared.get(port)!);
      }
    }
    own.set(c, mine);
  }
});

afterAll(async () => {
  const results = await Promise.allSettled(starting);
  await Promise.all(results.map((r) => (r.status === 'fulfilled' ? r.value.stop() : undefined)));
});

describe('the docs name the commands this test runs', () => {
  it('finds the README, capacity and conform commands', () => {
    const where = all.map((c) => c.where.split(':')[0]);
    expect(where).toContain('README.md');
    expect(where).toContain('docs/capacity.md');
    expect(where).toContain('docs/conform.md');
    expect(all.some((c) => c.args[0] === 'load')).toBe(true);
    expect(all.some((c) => c.args[0] === 'conform')).toBe(true);
  });
});

describe('docs commands, verbatim against the servers npm start runs', () => {
  // All at once, each `load` crowd on a server of its own (see `own`).
  for (const c of all) {
    it.concurrent(`${c.where}: gamewire ${c.line}`, async () => {
      const servers = own.get(c)!;
      const real = new Map<number, number>();
      for (const [port, s] of servers) {
        const info = SERVERS[port]!;
        real.set(port, (await s).port(info.endpoint[0] as 'tcp' | 'udp', info.endpoint[1]));
      }
      const args = c.args.map((a) =>
        a.replace(/127\.0\.0\.1:(\d+)/, (whole, port: string) => {
          const p = real.get(Number(port));
          return p === undefined ? whole : `127.0.0.1:${p}`;
        }),
      );
      const r = await runCliAsync(args, 120_000);
      expect(r.code, `${args.join(' ')}\n${r.stdout}\n${r.stderr}`).toBe(0);
    }, 120_000);
  }
});
