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

const served = new Map<number, Served>();

beforeAll(async () => {
  const wanted = new Set<number>();
  for (const c of all) for (const m of c.line.matchAll(/127\.0\.0\.1:(\d+)/g)) wanted.add(Number(m[1]));
  for (const port of wanted) {
    const s = SERVERS[port];
    if (s === undefined) throw new Error(`no server known for a command's port ${port}`);
    served.set(
      port,
      await startServe([...s.args, '--host', '127.0.0.1', '--no-admin'], { timeoutMs: 120_000 }),
    );
  }
}, 180_000);

afterAll(async () => {
  for (const s of served.values()) await s.stop();
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
  // One after the other: two crowds at once would not fit the one instance of 32.
  for (const c of all) {
    it(`${c.where}: gamewire ${c.line}`, async () => {
      const args = c.args.map((a) =>
        a.replace(/127\.0\.0\.1:(\d+)/, (whole, port: string) => {
          const s = served.get(Number(port));
          const info = SERVERS[Number(port)];
          return s === undefined || info === undefined
            ? whole
            : `127.0.0.1:${s.port(info.endpoint[0] as 'tcp' | 'udp', info.endpoint[1])}`;
        }),
      );
      const r = await runCliAsync(args, 120_000);
      expect(r.code, `${args.join(' ')}\n${r.stdout}\n${r.stderr}`).toBe(0);
    }, 120_000);
  }
});
