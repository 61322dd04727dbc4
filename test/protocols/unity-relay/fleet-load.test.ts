/**
 * `gamewire load unity-relay --api URL,URL` against a fleet: a real redis-server, two allocator
 * processes and two relay node processes (`serve unity-relay --role …`). Without --target the
 * players bind where each allocation says, so the games spread over the nodes the allocators
 * place them on.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProtocolLoad } from '../../helpers/load.js';
import { type RedisServer, startRedis } from '../../helpers/redis.js';
import { type Served, startServe } from '../../helpers/serve.js';
import { SECRET } from './fleet-helpers.js';

let redis: RedisServer | undefined;
const fleet: Served[] = [];
let dir = '';

beforeAll(async () => {
  redis = await startRedis();
  if (redis === undefined) return;
  dir = mkdtempSync(path.join(tmpdir(), 'gamewire-fleet-load-'));
  const secretFile = path.join(dir, 'relay-secret');
  writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
  const common = [
    'unity-relay',
    '--host',
    '127.0.0.1',
    '--no-admin',
    '--redis',
    redis.url,
    '--relay-secret-file',
    secretFile,
  ];
  const nodes = await Promise.all(
    ['n1', 'n2'].map((id) =>
      startServe([
        ...common,
        '--role',
        'relay',
        '--node-id',
        id,
        '--port',
        '0',
        '--dtls-port',
        '0',
        '--ws-port',
        '0',
        '--wss-port',
        '0',
      ]),
    ),
  );
  const allocators = await Promise.all(
    [0, 1].map(() => startServe([...common, '--role', 'allocator', '--api-port', '0'])),
  );
  fleet.push(...nodes, ...allocators);
}, 120_000);

afterAll(async () => {
  await Promise.all(fleet.map((p) => p.stop()));
  await redis?.dispose();
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

describe('load unity-relay against a fleet', () => {
  it('games allocated by two allocators bind on the nodes their allocations name, and relay', async (ctx) => {
    if (redis === undefined) ctx.skip();
    const apis = fleet.slice(2).map((a) => `http://127.0.0.1:${a.port('http')}`);
    const s = await runProtocolLoad(
      'unity-relay',
      { clients: 6, durationS: 3, from: ['127.0.4.1', '127.0.4.2', '127.0.4.3'] },
      { api: apis, relayRate: 20 },
    );
    expect(s.errorMessages).toEqual({});
    expect(s.sessions).toMatchObject({ started: 6, joined: 6, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.relaysReceived).toBeGreaterThan(0);
  }, 60_000);
});
