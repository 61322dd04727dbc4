/**
 * Every code block of README.md and docs/*.md that imports `gamewire` (or a subpath), run the way
 * a user would: from the packed tarball installed into an empty folder (packed.ts). `js` blocks
 * run as ES modules; `ts` blocks are type-checked with tsc --strict against the package's .d.ts
 * and then run with Node's type stripping. A block that talks to a server the reader would have
 * started names that server's default address: the test starts the same server from the
 * installed package on free ports and substitutes the real address. docs/library.md ("The
 * examples in these docs") states these rules for readers.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { type Packed, packedInstall, stopChild, userEnv } from './packed.js';

interface Example {
  /** doc:line, e.g. docs/library.md:112 */
  where: string;
  lang: 'js' | 'ts';
  code: string;
  typecheckOnly: boolean;
}

const DOCS = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];

/** Every fenced block of a markdown file, with its language and first line number. */
function blocks(doc: string): { lang: string; code: string; line: number }[] {
  const lines = readFileSync(path.join(ROOT, doc), 'utf8').split('\n');
  const out: { lang: string; code: string; line: number }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && !/^```\s*$/.test(lines[end]!)) end++;
    out.push({ lang: open[1]!, code: `${lines.slice(start, end).join('\n')}\n`, line: start });
    i = end;
  }
  return out;
}

const IMPORTS_GAMEWIRE = /from\s+['"]gamewire(?:\/[\w/-]+)?['"]|import\(\s*['"]gamewire/;
const all = DOCS.flatMap((doc) => blocks(doc).map((b) => ({ ...b, doc })));
const examples: Example[] = all
  .filter((b) => IMPORTS_GAMEWIRE.test(b.code))
  .map((b) => ({
    where: `${b.doc}:${b.line}`,
    lang: b.lang === 'ts' ? 'ts' : 'js',
    code: b.code,
    typecheckOnly: /^\/\/ type-checked only: /.test(b.code),
  }));

/**
 * Servers a block may expect the reader to have started (`gamewire serve …`), by the default
 * address the block names; the test starts each from the installed package on free ports.
 */
const SERVED: { address: string; args: string[]; endpoint: RegExp }[] = [
  {
    address: 'http://127.0.0.1:37080',
    args: [
      'unity-relay',
      '--port',
      '0',
      '--api-port',
      '0',
      '--dtls-port',
      '0',
      '--ws-port',
      '0',
      '--wss-port',
      '0',
    ],
    endpoint: /unity-relay http (127\.0\.0\.1:\d+) allocation API/,
  },
];

/** The `// comment` after each console.log: what the example promises to print. */
function promised(code: string): string[] {
  return [...code.matchAll(/console\.log\(.*\); \/\/ (.+)$/gm)].map((m) =>
    m[1]!.replace(/ \(.*\)$/, '').trim(),
  );
}

let packed: Packed;
let dir: string;
const servers: ChildProcess[] = [];
const addresses = new Map<string, string>();

/** Starts `gamewire serve …` from the installed package; resolves with the address the regex captures. */
function serve(args: string[], endpoint: RegExp): Promise<string> {
  const child = spawn(
    path.join(packed.app, 'node_modules', '.bin', 'gamewire'),
    ['serve', ...args, '--no-admin'],
    {
      cwd: packed.app,
      env: userEnv({ GAMEWIRE_DATAPLANE: undefined }),
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  servers.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = endpoint.exec(out);
      if (m !== null) resolve(`http://${m[1]}`);
    });
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.once('exit', (code) => reject(new Error(`serve ${args.join(' ')} exited ${code}: ${out}${err}`)));
  });
}

beforeAll(async () => {
  packed = await packedInstall();
  dir = path.join(packed.app, 'examples');
  mkdirSync(dir, { recursive: true });
  for (const s of SERVED) {
    if (examples.some((e) => !e.typecheckOnly && e.code.includes(s.address)))
      addresses.set(s.address, await serve(s.args, s.endpoint));
  }
}, 900_000);

afterAll(async () => {
  await Promise.all(servers.map((child) => stopChild(child)));
}, 60_000);

function fileOf(e: Example): string {
  return `${e.where.replace(/[^\w]+/g, '-')}.${e.lang === 'ts' ? 'ts' : 'mjs'}`;
}

describe('code blocks in README.md and docs/ that import gamewire', () => {
  it('exist where the docs promise them, and none imports from ./src or dist/', () => {
    const where = examples.map((e) => e.where.replace(/:\d+$/, ''));
    for (const doc of [
      'README.md',
      'docs/library.md',
      'docs/unity-relay.md',
      'docs/vcmp-rpc.md',
      'docs/rmc.md',
      'docs/dtls.md',
      'docs/errors.md',
    ])
      expect(where, doc).toContain(doc);
    const internal = all.filter((b) => /from\s+['"](?:\.{1,2}\/)+(?:src|dist)\//.test(b.code));
    expect(internal.map((b) => `${b.doc}:${b.line}`)).toEqual([]);
  });

  /** Type-checks every `ts` block with `compilerOptions` in a tsconfig of its own; '' when clean. */
  function typecheck(name: string, compilerOptions: Record<string, unknown>): string {
    const ts = examples.filter((e) => e.lang === 'ts');
    expect(ts.length).toBeGreaterThan(0);
    for (const e of ts) writeFileSync(path.join(dir, fileOf(e)), e.code);
    const config = path.join(dir, `tsconfig.${name}.json`);
    writeFileSync(
      config,
      JSON.stringify({
        compilerOptions: { ...compilerOptions, typeRoots: [path.join(ROOT, 'node_modules', '@types')] },
        include: ts.map(fileOf),
      }),
    );
    const r = spawnSync(
      process.execPath,
      [path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', config],
      { cwd: dir, encoding: 'utf8', timeout: 300_000 },
    );
    return `${r.stdout}${r.stderr}`.trim() || (r.status === 0 ? '' : `tsc exited ${r.status}`);
  }

  it('type-check against the installed package (tsc --strict, skipLibCheck off)', () => {
    // skipLibCheck off: the compiler reads every .d.ts the package's types reach. They must name
    // no dependency (ioredis, fastify, pino, ws, commander): a dependency's new release with
    // broken types would otherwise break every user who never imported it.
    const out = typecheck('strict', {
      module: 'nodenext',
      moduleResolution: 'nodenext',
      target: 'es2023',
      lib: ['es2023'],
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      types: ['node'],
    });
    expect(out, 'type errors in the docs examples').toBe('');
  }, 300_000);

  it("type-check with the config `tsc --init` writes (declarations on), plus types: ['node']", () => {
    // Declarations on: every type an example's exported value infers must be exported by the
    // package (TS2883 otherwise). The options are those TypeScript 7's `tsc --init` writes.
    const out = typecheck('init', {
      module: 'nodenext',
      target: 'esnext',
      types: ['node'],
      declaration: true,
      declarationMap: true,
      emitDeclarationOnly: true,
      outDir: path.join(dir, 'out-init'),
      noUncheckedIndexedAccess: true,
      exactOptionalPropertyTypes: true,
      strict: true,
      verbatimModuleSyntax: true,
      isolatedModules: true,
      noUncheckedSideEffectImports: true,
      moduleDetection: 'force',
      skipLibCheck: true,
    });
    expect(out, 'type errors in the docs examples').toBe('');
  }, 300_000);

  it('the types of every entry point reach no dependency, only node:', () => {
    const pkgDir = path.join(packed.app, 'node_modules', 'gamewire');
    const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as {
      exports: Record<string, string>;
    };
    const leaks: string[] = [];
    const seen = new Set<string>();
    const stack = Object.values(pkg.exports)
      .filter((target) => target.endsWith('.js'))
      .map((target) => path.join(pkgDir, target.replace(/\.js$/, '.d.ts')));
    expect(stack.length).toBeGreaterThan(10);
    while (stack.length > 0) {
      const file = stack.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      const text = readFileSync(file, 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/\/\/.*$/gm, '');
      for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\(\s*|^import\s+)['"]([^'"]+)['"]/gm)) {
        const spec = m[1]!;
        if (spec.startsWith('.')) stack.push(path.join(path.dirname(file), spec.replace(/\.js$/, '.d.ts')));
        else if (!spec.startsWith('node:')) leaks.push(`${path.relative(pkgDir, file)} imports ${spec}`);
      }
    }
    expect(seen.size).toBeGreaterThan(50);
    expect(leaks).toEqual([]);
  });

  for (const e of examples.filter((x) => !x.typecheckOnly)) {
    it(`${e.where} runs and prints what its comments say`, () => {
      let code = e.code;
      for (const [address, real] of addresses) code = code.replaceAll(address, real);
      const file = path.join(dir, `run-${fileOf(e)}`);
      writeFileSync(file, code);
      const r = spawnSync(process.execPath, [file], {
        cwd: packed.app,
        encoding: 'utf8',
        timeout: 60_000,
        env: userEnv({ GAMEWIRE_DATAPLANE: undefined }),
      });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      const lines = r.stdout.trim().split('\n');
      for (const literal of promised(e.code)) {
        expect(
          lines.some((l) => l.includes(literal)),
          `${e.where}: "${literal}" in ${r.stdout}`,
        ).toBe(true);
      }
    }, 90_000);
  }
});
