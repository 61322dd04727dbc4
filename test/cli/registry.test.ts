import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configReference } from '../../src/cli/config.js';
import { startOpsServer } from '../../src/core/health.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { METRIC_DOCS } from '../../src/core/prometheus.js';
import { allCodecs } from '../../src/protocols/codecs.js';
import { loadProtocols, registry } from '../../src/protocols/registry.js';
import { ROOT } from '../helpers/cli.js';

const modules = await loadProtocols();

describe('the light registry', () => {
  it('describes each module exactly as the module describes itself', async () => {
    expect(modules.map((m) => m.name)).toEqual(registry.map((e) => e.name));
    for (const [i, entry] of registry.entries()) {
      const m = modules[i]!;
      expect(entry.summary, entry.name).toBe(m.summary);
      // A mismatch means src/protocols/registry.ts needs the module's new codec (name and loader).
      expect(entry.codecs, `${entry.name}: update its entry in src/protocols/registry.ts`).toEqual(
        m.codecs.map((c) => c.name),
      );
      expect(entry.hasServer, entry.name).toBe(m.server !== undefined);
      expect(entry.hasCommands, entry.name).toBe(m.registerCommands !== undefined);
      expect(entry.hasConform, entry.name).toBe(m.conform !== undefined);
      expect(entry.loadInspection !== undefined, entry.name).toBe(m.inspection !== undefined);
      if (m.inspection !== undefined)
        expect(await entry.loadInspection!(), entry.name).toBe(await m.inspection());
      expect(entry.hasLoad, entry.name).toBe(m.load !== undefined);
      const codecs = await entry.loadCodecs();
      expect(codecs, entry.name).toEqual(m.codecs);
    }
    expect(allCodecs.map((c) => c.name)).toEqual(registry.flatMap((e) => e.codecs));
  });
});

describe('docs/config.md', () => {
  it('is what `gamewire config reference` prints (regenerate with npm run docs:config)', () => {
    const doc = readFileSync(path.join(ROOT, 'docs/config.md'), 'utf8');
    expect(doc).toBe(configReference(modules));
  });
});

describe('the metrics endpoint', () => {
  it('serves /health, /ready by state, and only documented metrics', async () => {
    let state: 'starting' | 'ready' | 'stopping' = 'starting';
    const m = new ProtocolMetrics('rmc');
    m.received = 3;
    m.drop('malformed');
    m.close('idle_timeout');
    m.count('logins');
    const ops = await startOpsServer({
      host: '127.0.0.1',
      port: 0,
      metrics: () => [m],
      running: () => ['rmc'],
      state: () => state,
    });
    try {
      const base = `http://127.0.0.1:${ops.port}`;
      expect((await fetch(`${base}/health`)).status).toBe(200);
      expect((await fetch(`${base}/ready`)).status).toBe(503);
      state = 'ready';
      const ready = await fetch(`${base}/ready`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: 'ready', servers: ['rmc'] });
      state = 'stopping';
      expect((await fetch(`${base}/ready`)).status).toBe(503);
      const text = await (await fetch(`${base}/metrics`)).text();
      expect(text).toContain('gamewire_messages_received_total{protocol="rmc"} 3');
      expect(text).toContain('gamewire_dropped_total{protocol="rmc",reason="malformed"} 1');
      expect(text).toMatch(/gamewire_process_cpu_user_seconds_total \d/);
      expect(text).toMatch(/gamewire_nodejs_eventloop_lag_seconds \d/);
      const documented = METRIC_DOCS.map((d) => d.name);
      const families = [...text.matchAll(/^# TYPE (\S+) /gm)].map((x) => x[1]!);
      for (const f of families) {
        if (/^gamewire_(process|nodejs)_/.test(f)) continue;
        expect(documented, f).toContain(f);
      }
    } finally {
      await ops.close();
    }
  });
});

describe('the metrics endpoint with an admin token', () => {
  it('requires the bearer token on /metrics and leaves the probes open', async () => {
    const ops = await startOpsServer({
      host: '127.0.0.1',
      port: 0,
      metrics: () => [],
      running: () => [],
      state: () => 'ready',
      token: 's3cret',
    });
    try {
      const base = `http://127.0.0.1:${ops.port}`;
      expect((await fetch(`${base}/metrics`)).status).toBe(401);
      expect((await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer wrong!' } })).status).toBe(
        401,
      );
      expect((await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer s3cret' } })).status).toBe(
        200,
      );
      expect((await fetch(`${base}/health`)).status).toBe(200);
      expect((await fetch(`${base}/ready`)).status).toBe(200);
    } finally {
      await ops.close();
    }
  });
});
