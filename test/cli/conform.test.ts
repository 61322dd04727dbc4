/**
 * `gamewire conform`, protocol-free parts: the reference in docs/conform.md is generated from the
 * checks' declarations, every check cites a source, targets parse, an unreachable target fails.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, test } from 'vitest';
import { conformSections, formatResult, parseTarget } from '../../src/cli/conform.js';
import { loadProtocols, registry } from '../../src/protocols/registry.js';
import { ROOT, runCliAsync } from '../helpers/cli.js';

describe('docs/conform.md', () => {
  test('holds each protocol’s generated check list (regenerate with npm run docs:conform)', async () => {
    const doc = readFileSync(path.join(ROOT, 'docs/conform.md'), 'utf8');
    const sections = await conformSections();
    expect(sections.length).toBeGreaterThan(0);
    for (const [name, text] of sections) {
      const start = `<!-- conform:${name} -->\n`;
      const a = doc.indexOf(start);
      const b = doc.indexOf(`<!-- /conform:${name} -->`);
      expect(a, `docs/conform.md needs a section for ${name}`).toBeGreaterThanOrEqual(0);
      expect(doc.slice(a + start.length, b), `${name}: run npm run docs:conform`).toBe(text);
    }
  });
});

describe('every suite', () => {
  test('has unique ids, a rule, a consequence and a source for every check, and known requirements', async () => {
    for (const m of await loadProtocols()) {
      if (m.conform === undefined) continue;
      const suite = await m.conform();
      expect(suite.protocol).toBe(m.name);
      const ids = suite.checks.map((c) => c.id);
      expect(new Set(ids).size, m.name).toBe(ids.length);
      for (const c of suite.checks) {
        expect(c.rule.length, c.id).toBeGreaterThan(20);
        expect(c.clientReaction.length, c.id).toBeGreaterThan(20);
        expect(c.sources.length, c.id).toBeGreaterThan(0);
        for (const s of c.sources) expect(s.url ?? s.repo, c.id).toMatch(/^(https:\/\/|[\w.-]+\/[\w.-]+$)/);
        // A requirement must come earlier in the list (the runner keeps list order).
        for (const r of c.requires ?? [])
          expect(ids.indexOf(r), `${c.id} needs ${r}`).toBeLessThan(ids.indexOf(c.id));
      }
    }
    expect(registry.some((e) => e.hasConform)).toBe(true);
  });
});

describe('the command', () => {
  test('parses targets and refuses bad ones', () => {
    expect(parseTarget('127.0.0.1:43594')).toEqual({ host: '127.0.0.1', port: 43594 });
    expect(parseTarget('[::1]:9103')).toEqual({ host: '::1', port: 9103 });
    expect(parseTarget('relay.example.com:37000')).toEqual({ host: 'relay.example.com', port: 37000 });
    expect(() => parseTarget('127.0.0.1')).toThrow(/HOST:PORT/);
    expect(() => parseTarget('127.0.0.1:0')).toThrow(/1-65535/);
  });

  test('formats a failure with its evidence and what a real client does', () => {
    const text = formatResult({
      id: 'x.y',
      title: 'a rule',
      status: 'fail',
      ms: 3,
      message: 'wrong',
      evidence: {
        sent: Buffer.from('0f', 'hex'),
        expected: Buffer.from('00', 'hex'),
        received: Buffer.alloc(0),
        note: 'n',
      },
      clientReaction: 'it gives up',
      sources: [],
    });
    expect(text).toBe(
      'FAIL  x.y                          a rule (3 ms)\n      wrong\n      sent:      0f\n      expected:  00\n      received:  (nothing)\n      note:      n\n      a real client: it gives up\n',
    );
  });

  test('a target where nothing listens: --json still reports the first check failed and the rest skipped, exit 1', async () => {
    const r = await runCliAsync(['conform', 'js5', '--target', '127.0.0.1:1', '--json']);
    expect(r.code).toBe(1);
    const report = JSON.parse(r.stdout) as {
      failed: number;
      checks: { id: string; status: string; message?: string }[];
    };
    expect(report.failed).toBe(1);
    expect(report.checks[0]).toMatchObject({ id: 'handshake.ok', status: 'fail' });
    expect(report.checks[0]!.message).toMatch(/cannot connect to 127.0.0.1:1/);
    // The error line says the target was not reached (test/cli/conform-reach.test.ts: the text report).
    expect(JSON.parse(r.stderr).error.code).toBe('ERR_CONFORM_UNREACHABLE');
  }, 60_000);
});
