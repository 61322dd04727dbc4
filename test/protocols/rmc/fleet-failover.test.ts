/**
 * An RMC fleet node on a Sentinel set (one primary, two replicas, three sentinels; real
 * processes): players keep registering (a new account each) while the primary is killed
 * (kill -9). Every account whose login was acknowledged logs in again afterwards with the same
 * PID; no PID is handed out twice; failed logins are `RendezVous::ConnectionFailure`, and logins
 * succeed again within a measured bound.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { completeOptions } from '../../../src/core/config.js';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { createRegistry } from '../../../src/core/prometheus.js';
import type { RmcFleetServer } from '../../../src/protocols/rmc/fleet/start.js';
import { LoginProtocol, RmcClient, rmc } from '../../../src/protocols/rmc/index.js';
import { type SentinelSet, startSentinelSet } from '../../helpers/redis.js';
import { waitFor } from '../../helpers/wait.js';

let set: SentinelSet | undefined;
let cleanup: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const f of cleanup.reverse()) await f().catch(() => {});
  cleanup = [];
  await set?.dispose();
  set = undefined;
});

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});

describe('rmc fleet on a Sentinel set', () => {
  it('kill -9 of the primary: every acknowledged account logs in again with its PID; none is doubled', async (ctx) => {
    set = await startSentinelSet();
    if (set === undefined) return ctx.skip();
    const s = set;
    const def = rmc.server!;
    const options = completeOptions('rmc', def, {
      host: '127.0.0.1',
      port: 0,
      role: 'all',
      redis: s.url(),
      nodeId: 'sec-1',
      heartbeatTtlMs: 3000,
      registrationsPerIpPerHour: 0,
      registrationsPerHour: 0,
    });
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'gw-rmc-failover-'));
    cleanup.push(async () => rmSync(dataDir, { recursive: true, force: true }));
    const metrics = new ProtocolMetrics('rmc');
    const server = (await def.start(options, {
      log: silentLogger(),
      metrics,
      dataDir,
    })) as unknown as RmcFleetServer;
    cleanup.push(() => server.close());
    const port = server.endpoints.find((e) => e.transport === 'tcp')!.port;

    const acked = new Map<string, string>();
    const outcomes: { at: number; ok: boolean; error?: string }[] = [];
    let stopped = false;
    let n = 0;
    const loop = async () => {
      while (!stopped) {
        const token = `player-${n++}`;
        const at = Date.now();
        let c: RmcClient | undefined;
        try {
          c = await RmcClient.connect({ host: '127.0.0.1', port });
          const r = await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(token));
          acked.set(token, String(r.userPid));
          outcomes.push({ at, ok: true });
        } catch (err) {
          outcomes.push({ at, ok: false, error: (err as Error).message });
          await new Promise((r) => setTimeout(r, 50));
        } finally {
          await c?.close();
        }
      }
    };
    const loops = [loop(), loop()];
    // A test that fails before its end stops its load too.
    cleanup.push(async () => {
      stopped = true;
    });
    /** Waits until `n` more logins than now were acknowledged (the load has run on, whatever the machine's speed). */
    const acknowledged = async (n: number, what: string) => {
      const from = Date.now();
      await waitFor(() => outcomes.filter((o) => o.ok && o.at >= from).length >= n, {
        what: `${n} ${what}`,
        timeoutMs: 15_000,
      });
    };
    await acknowledged(20, 'new accounts acknowledged before the kill');
    const old = await s.primary();
    const killedAt = Date.now();
    await old.kill();
    await waitFor(() => outcomes.some((o) => o.ok && o.at > killedAt && outcomes.some((f) => !f.ok)), {
      what: 'a login acknowledged after the failover',
      timeoutMs: 15_000,
      intervalMs: 50,
    });
    await acknowledged(10, 'logins acknowledged on the new primary');
    stopped = true;
    await Promise.all(loops);
    const failures = outcomes.filter((o) => !o.ok);
    const lastFailure = Math.max(killedAt, ...failures.map((f) => f.at));
    const firstOk = outcomes.find((o) => o.ok && o.at >= lastFailure);
    console.log(
      `[rmc failover kill -9] ${failures.length} failed logins, the last ${lastFailure - killedAt} ms after the kill; ` +
        `first success ${firstOk === undefined ? 'none' : firstOk.at - killedAt} ms after it; ${acked.size} accounts acknowledged`,
    );
    for (const f of failures) expect(f.error).toMatch(/ConnectionFailure|store/);
    expect(firstOk).toBeDefined();
    expect(firstOk!.at - killedAt).toBeLessThan(10_000);

    // Every acknowledged account logs in again, with the PID it was given.
    const c = await RmcClient.connect({ host: '127.0.0.1', port });
    cleanup.push(() => c.close());
    // A "try again later" answer (RendezVous::ConnectionFailure: the store, still settling after the
    // failover, did not answer in time) is retried, as a client does; any other answer is final.
    for (const [token, pid] of acked) {
      const r = await retryConnectionFailure(() =>
        c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(token)),
      );
      expect(String(r.userPid), token).toBe(pid);
    }
    // No PID twice over the accounts the store holds (acknowledged or not).
    const { Redis } = await import('ioredis');
    const primary = await s.primary();
    const raw = new Redis({ port: primary.port, host: '127.0.0.1' });
    cleanup.push(async () => raw.disconnect());
    const all = Object.values(await raw.hgetall('gamewire:rmc:accounts')).map(
      (j) => JSON.parse(j).pid as string,
    );
    expect(new Set(all).size).toBe(all.length);
    expect(all.length).toBeGreaterThanOrEqual(acked.size);

    const text = await createRegistry(() => [metrics]).metrics();
    expect(text).toContain(
      `gamewire_store_primary_info{protocol="rmc",mode="sentinel",primary="${primary.address}"} 1`,
    );
    expect(text).toContain('gamewire_store_failovers_total{protocol="rmc"} 1');
    expect(text).toMatch(/gamewire_store_durable_writes_total\{protocol="rmc"\} [1-9]/);
  }, 45_000);
});

/** `call()` again while it answers RendezVous::ConnectionFailure, for at most 20 s. */
async function retryConnectionFailure<T>(call: () => Promise<T>): Promise<T> {
  const until = Date.now() + 20_000;
  for (;;) {
    try {
      return await call();
    } catch (err) {
      if (!/ConnectionFailure/.test(String((err as Error).message)) || Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
