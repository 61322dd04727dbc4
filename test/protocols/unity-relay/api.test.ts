/** The allocation API over real HTTP (fastify), shaped as the Relay SDK parses it. */
import { afterEach, describe, expect, it } from 'vitest';
import {
  bytesFromGuid,
  describeConnectionData,
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import { elapse } from '../../helpers/wait.js';

let server: UnityRelayInstance | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}) {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, ...options });
  return server;
}

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${server!.apiUrl}${path}`, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, type: res.headers.get('content-type') ?? '', json: (await res.json()) as any };
}

function expectErrorBody(r: { status: number; type: string; json: any }, status: number) {
  expect(r.status).toBe(status);
  expect(r.type).toMatch(/^application\/problem\+json/);
  expect(r.json).toMatchObject({
    status,
    code: expect.any(Number),
    title: expect.any(String),
    detail: expect.any(String),
    type: expect.any(String),
  });
}

describe('unity-relay allocation API', () => {
  it('POST /v1/allocate: 201 with an allocation the SDK and UTP accept', async () => {
    await start({ publicHost: '203.0.113.10' });
    const r = await call('POST', '/v1/allocate', { maxConnections: 3 });
    expect(r.status).toBe(201);
    expect(r.json.meta).toMatchObject({ status: 201, requestId: expect.any(String) });
    const a = r.json.data.allocation;
    expect(a.allocationId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    // allocationIdBytes = base64 of the GUID's RFC-4122 bytes.
    expect(Buffer.from(a.allocationIdBytes, 'base64').equals(bytesFromGuid(a.allocationId)!)).toBe(true);
    expect(Buffer.from(a.key, 'base64')).toHaveLength(64);
    const cd = Buffer.from(a.connectionData, 'base64');
    expect(cd).toHaveLength(255);
    const fields = describeConnectionData(cd);
    expect(Buffer.from(fields.allocationId).toString('base64')).toBe(a.allocationIdBytes);
    expect(fields).toMatchObject({ role: 0, maxConnections: 3 });
    expect(a.relayServer).toEqual({ ipV4: '203.0.113.10', port: server!.udpPort });
    expect(a.serverEndpoints).toEqual([
      {
        connectionType: 'udp',
        network: 'udp',
        reliable: false,
        secure: false,
        host: '203.0.113.10',
        port: server!.udpPort,
      },
    ]);
    expect(a.region).toBe('local-1');
    expect(a.hostConnectionData).toBeUndefined();
  });

  it('GUID bytes follow the documented example', () => {
    expect(bytesFromGuid('f26ed6cc-6ba7-11eb-b7e1-4f0436c8d458')!.toString('base64')).toBe(
      '8m7WzGunEeu34U8ENsjUWA==',
    );
  });

  it('POST /v1/joincode carries links; POST /v1/join returns a JoinAllocation with hostConnectionData', async () => {
    await start();
    const host = (await call('POST', '/v1/allocate', { maxConnections: 2 })).json.data.allocation;
    const jc = await call('POST', '/v1/joincode', { allocationId: host.allocationId });
    expect(jc.status).toBe(201);
    expect(jc.json.links).toEqual({});
    const code: string = jc.json.data.joinCode;
    expect(code).toMatch(/^[A-Z2-9]{6}$/);
    // Asking again gives the same code.
    expect((await call('POST', '/v1/joincode', { allocationId: host.allocationId })).json.data.joinCode).toBe(
      code,
    );
    const j = await call('POST', '/v1/join', { joinCode: code.toLowerCase() });
    expect(j.status).toBe(200);
    const a = j.json.data.allocation;
    expect(a.hostConnectionData).toBe(host.connectionData);
    expect(a.allocationId).not.toBe(host.allocationId);
    expect(describeConnectionData(Buffer.from(a.connectionData, 'base64')).role).toBe(1);
  });

  it('GET /v1/regions', async () => {
    await start();
    const r = await call('GET', '/v1/regions');
    expect(r.status).toBe(200);
    expect(r.json.data.regions).toEqual([{ id: 'local-1', description: expect.any(String) }]);
  });

  it('errors use the ErrorResponseBody', async () => {
    await start();
    expectErrorBody(await call('POST', '/v1/allocate', { maxConnections: 0 }), 400);
    expectErrorBody(await call('POST', '/v1/allocate', { maxConnections: 151 }), 400);
    expectErrorBody(await call('POST', '/v1/allocate', {}), 400);
    const region = await call('POST', '/v1/allocate', { maxConnections: 1, region: 'mars' });
    expectErrorBody(region, 400);
    expect(region.json.details).toEqual([{ key: 'region', value: 'mars' }]);
    // The SDK's fallback region is accepted as ours.
    const fallback = await call('POST', '/v1/allocate', { maxConnections: 1, region: 'default' });
    expect(fallback.status).toBe(201);
    expect(fallback.json.data.allocation.region).toBe('local-1');
    expectErrorBody(await call('POST', '/v1/join', { joinCode: 'NOPE22' }), 404);
    expectErrorBody(
      await call('POST', '/v1/joincode', { allocationId: '00000000-0000-4000-8000-000000000000' }),
      404,
    );
    expectErrorBody(await call('POST', '/v1/joincode', { allocationId: 'not-a-guid' }), 400);
    expectErrorBody(await call('GET', '/v1/nothing'), 404);
    const client = (await call('POST', '/v1/allocate', { maxConnections: 1 })).json.data.allocation;
    const code = (await call('POST', '/v1/joincode', { allocationId: client.allocationId })).json.data
      .joinCode;
    const joined = (await call('POST', '/v1/join', { joinCode: code })).json.data.allocation;
    expectErrorBody(await call('POST', '/v1/joincode', { allocationId: joined.allocationId }), 400);
  });

  it('join codes expire', async () => {
    await start({ joinCodeTtlMs: 150 });
    const host = (await call('POST', '/v1/allocate', { maxConnections: 2 })).json.data.allocation;
    const code = (await call('POST', '/v1/joincode', { allocationId: host.allocationId })).json.data.joinCode;
    expect((await call('POST', '/v1/join', { joinCode: code })).status).toBe(200);
    await elapse(250, 'the join code TTL (150 ms) must lapse');
    expectErrorBody(await call('POST', '/v1/join', { joinCode: code }), 404);
    // A new code can be issued while the host allocation lives.
    const again = (await call('POST', '/v1/joincode', { allocationId: host.allocationId })).json.data
      .joinCode;
    expect(again).not.toBe(code);
  });

  it('an API key is required once configured (Bearer)', async () => {
    await start({ apiKey: 'k'.repeat(24) });
    expectErrorBody(await call('GET', '/v1/regions'), 401);
    expectErrorBody(await call('GET', '/v1/regions', undefined, { authorization: 'Bearer wrong' }), 401);
    expect(
      (await call('GET', '/v1/regions', undefined, { authorization: `Bearer ${'k'.repeat(24)}` })).status,
    ).toBe(200);
  });

  it('without a key the API refuses to listen beyond loopback', async () => {
    await expect(
      startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, apiHost: '0.0.0.0' }),
    ).rejects.toThrow(/api-key/);
  });

  it('answers 503 when the store is full', async () => {
    await start({ store: { maxAllocations: 2 } });
    expect((await call('POST', '/v1/allocate', { maxConnections: 1 })).status).toBe(201);
    expect((await call('POST', '/v1/allocate', { maxConnections: 1 })).status).toBe(201);
    expectErrorBody(await call('POST', '/v1/allocate', { maxConnections: 1 }), 503);
  });

  it('rate-limits per client and endpoint', async () => {
    await start({ apiRateLimitPerMinute: 3 });
    for (let i = 0; i < 3; i++) expect((await call('GET', '/v1/regions')).status).toBe(200);
    const limited = await call('GET', '/v1/regions');
    expectErrorBody(limited, 429);
    expect((await call('POST', '/v1/allocate', { maxConnections: 1 })).status).toBe(201);
  });
});
