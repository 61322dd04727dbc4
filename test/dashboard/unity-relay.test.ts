/**
 * The admin API over a real Unity Relay (both data planes) with real clients chatting: state,
 * counters, the wire view (decoded, secrets masked), the disconnect and end actions, the stream.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { MemoryNodeRegistry } from '../../src/core/node-registry.js';
import { relayAdmin } from '../../src/protocols/unity-relay/admin.js';
import { fleetView, RELAY_NODE_KIND } from '../../src/protocols/unity-relay/fleet/view.js';
import {
  RelayApiClient,
  startUnityRelay,
  UnityRelayClient,
  type UnityRelayInstance,
  unityRelay,
} from '../../src/protocols/unity-relay/index.js';
import { loadNativeDataplane } from '../../src/protocols/unity-relay/native-dataplane.js';
import { type Admin, entry, eventually, openStream, startAdmin } from './helpers.js';

const planes: ('js' | 'native')[] = loadNativeDataplane().addon === undefined ? ['js'] : ['js', 'native'];
const fast = { retryMs: 100, pingIntervalMs: 3000 };

let server: UnityRelayInstance | undefined;
let admin: Admin | undefined;
const clients: UnityRelayClient[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await admin?.admin.close();
  await server?.close();
  admin = undefined;
  server = undefined;
});

async function setup(dataplane: 'js' | 'native') {
  const metrics = new ProtocolMetrics('unity-relay');
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, dataplane, metrics });
  admin = await startAdmin([entry(unityRelay, server, metrics)]);
  const api = new RelayApiClient(server.apiUrl);
  return { api, admin, server, metrics };
}

async function chat(api: RelayApiClient) {
  const host = await UnityRelayClient.host(api, 4, fast);
  clients.push(host.client);
  const guest = await UnityRelayClient.join(api, host.joinCode, fast);
  clients.push(guest);
  const got = new Promise<Buffer>((resolve) => host.client.once('message', (d: Buffer) => resolve(d)));
  guest.send(Buffer.from('hello host'));
  expect((await got).toString()).toBe('hello host');
  return { host, guest };
}

/** Every secret a client of this chat holds, as the hex and base64 forms that could leak. */
function secretsOf(...cs: UnityRelayClient[]): string[] {
  const out: string[] = [];
  for (const c of cs) {
    const d = c.data as unknown as { key: Buffer; connectionData: Buffer };
    for (const b of [d.key, d.connectionData]) out.push(b.toString('hex'), b.toString('base64'));
  }
  return out;
}

describe.each(planes)('the admin API over unity-relay (%s data plane)', (dataplane) => {
  it('lists the server with counters, and its allocations, join code, peers and traffic', async () => {
    const { api, admin, metrics } = await setup(dataplane);
    const { host, guest } = await chat(api);
    const list = await admin.json<{ servers: any[] }>('/api/servers');
    expect(list.servers).toHaveLength(1);
    const s = list.servers[0];
    expect(s.protocol).toBe('unity-relay');
    expect(s.endpoints.some((e: any) => e.transport === 'udp')).toBe(true);
    expect(s.counters.received).toBeGreaterThan(0);
    expect(s.counters.bytesReceived).toBeGreaterThan(s.counters.received);
    expect(s.counters.bytesSent).toBeGreaterThan(0);
    expect(s.counters.open).toBe(2);

    const detail = await admin.json<any>('/api/servers/unity-relay');
    expect(detail.protocol).toBe('unity-relay');
    expect(detail.state.dataplane).toBe(dataplane);
    expect(detail.state.nodes).toBeNull();
    const hostId = host.client.allocationId.toString('hex');
    const byId = new Map<string, any>(detail.state.allocations.map((a: any) => [a.id.replace(/-/g, ''), a]));
    const h = byId.get(hostId);
    const g = byId.get(guest.allocationId.toString('hex'));
    expect(h).toMatchObject({ role: 'host', state: 'bound', transport: 'udp', joinCode: host.joinCode });
    expect(g).toMatchObject({ role: 'client', state: 'bound', transport: 'udp', peers: [h.id] });
    expect(h.boundAddress).toBe(`127.0.0.1:${host.client.localPort}`);
    expect(h.peers).toEqual([g.id]);
    // BINDs, CONNECT_REQUEST and the RELAY were counted per allocation (the RELAY by the native
    // data plane when it forwarded it).
    expect(g.packetsIn).toBeGreaterThan(0);
    expect(g.bytesIn).toBeGreaterThan(38 + 'hello host'.length);
    expect(h.packetsOut).toBeGreaterThan(0);
    expect(h.bytesOut).toBeGreaterThanOrEqual(38 + 'hello host'.length);
    expect(detail.state.joinCodes).toEqual([
      { code: host.joinCode, host: h.id, expiresAt: expect.any(Number) },
    ]);
    expect(metrics.bytesReceived).toBeGreaterThan(0);

    const text = JSON.stringify(list) + JSON.stringify(detail);
    for (const secret of secretsOf(host.client, guest)) expect(text).not.toContain(secret);
    expect((await admin.get('/api/servers/js5')).status).toBe(404);
  });

  it('the wire view shows a just-sent RELAY decoded, and masks BIND secrets in fields and hex', async () => {
    const { api, admin } = await setup(dataplane);
    // Arm the tap before anyone binds, so the BINDs are seen too.
    const first = await admin.json<any>('/api/wire/unity-relay');
    expect(first).toMatchObject({ messages: [], sampled: 0 });
    const { host, guest } = await chat(api);
    guest.send(Buffer.from('wire hello'));
    const payload = Buffer.from('wire hello').toString('hex');
    const relay = await eventually(
      async () => {
        const page = await admin.json<any>('/api/wire/unity-relay?after=0&limit=500');
        return page.messages.find(
          (m: any) => m.name === 'RELAY' && m.direction === 'client' && m.fields?.data === payload,
        );
      },
      8000,
      'the RELAY in the wire view',
    );
    expect(relay.transport).toBe('udp');
    expect(relay.hex).toContain(payload);
    expect(relay.length).toBe(38 + 10);
    expect(relay.truncated).toBe(false);
    expect(relay.error).toBeNull();
    // The relay's forward of it to the host is there too (server direction).
    const page = await admin.json<any>('/api/wire/unity-relay?after=0&limit=500');
    expect(
      page.messages.some(
        (m: any) => m.name === 'RELAY' && m.direction === 'server' && m.fields?.data === payload,
      ),
    ).toBe(true);
    const bind = page.messages.find((m: any) => m.name === 'BIND');
    expect(bind).toBeDefined();
    expect(bind.fields.connectionData).toBe('<redacted>');
    expect(bind.fields.hmac).toBe('<redacted>');
    expect(page.seen).toBeGreaterThanOrEqual(page.sampled);
    expect(page.next).toBe(page.messages[page.messages.length - 1].seq);
    const text = JSON.stringify(page);
    for (const secret of secretsOf(host.client, guest)) expect(text).not.toContain(secret);
    // Paging: nothing after `next`.
    const after = await admin.json<any>(`/api/wire/unity-relay?after=${page.next + 1000}`);
    expect(after.messages).toEqual([]);
    // limit is bounded: 0 is refused, above the maximum is cut to it.
    expect((await admin.get('/api/wire/unity-relay?limit=0')).status).toBe(400);
    expect((await admin.get('/api/wire/unity-relay?after=-1')).status).toBe(400);
    const many = await admin.json<any>('/api/wire/unity-relay?limit=100000');
    expect(many.messages.length).toBeLessThanOrEqual(500);
  });

  it('disconnect unbinds the allocation: its peer is told, and it is no longer bound', async () => {
    const { api, admin } = await setup(dataplane);
    const { host, guest } = await chat(api);
    const guestId = (await admin.json<any>('/api/servers/unity-relay')).state.allocations.find(
      (a: any) => a.role === 'client',
    ).id;
    const path = `/api/servers/unity-relay/connections/${guestId}/disconnect`;
    // GET never acts; POST needs the action token.
    expect((await admin.get(path)).status).toBe(405);
    expect((await admin.post(path, null)).status).toBe(403);
    expect((await admin.post(path, 'wrong-token')).status).toBe(403);
    const told = new Promise<Buffer>((resolve) =>
      host.client.once('disconnect', (from: Buffer) => resolve(from)),
    );
    const r = await admin.post(path);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ ok: true });
    expect((await told).equals(guest.allocationId)).toBe(true);
    const after = (await admin.json<any>('/api/servers/unity-relay')).state.allocations.find(
      (a: any) => a.id === guestId,
    );
    // The guest's client re-binds on its next message (ERROR 3), as after a CLOSE; right now it is unbound or re-bound without peers.
    expect(after === undefined || after.peers.length === 0).toBe(true);
    expect(
      (
        await admin.post(
          '/api/servers/unity-relay/connections/00000000-0000-4000-8000-000000000000/disconnect',
        )
      ).status,
    ).toBe(404);
  });

  it('end expires the allocation now: its peer is told and it leaves the list', async () => {
    const { api, admin, metrics } = await setup(dataplane);
    const { host, guest } = await chat(api);
    const hostId = (await admin.json<any>('/api/servers/unity-relay')).state.allocations.find(
      (a: any) => a.role === 'host',
    ).id;
    const told = new Promise<Buffer>((resolve) => guest.once('disconnect', (from: Buffer) => resolve(from)));
    expect((await admin.post(`/api/servers/unity-relay/allocations/${hostId}/end`)).status).toBe(200);
    expect((await told).equals(host.client.allocationId)).toBe(true);
    const state = (await admin.json<any>('/api/servers/unity-relay')).state;
    expect(state.allocations.map((a: any) => a.id)).not.toContain(hostId);
    expect(state.joinCodes).toEqual([]);
    expect(metrics.closed.get('admin_end')).toBe(1);
    expect((await admin.post(`/api/servers/unity-relay/allocations/${hostId}/end`)).status).toBe(404);
    // Drain is not something a standalone relay does.
    expect((await admin.post('/api/servers/unity-relay/drain')).status).toBe(409);
  });

  it('lists the live nodes of a scaled-out relay, and drains it', async () => {
    const { server } = await setup(dataplane);
    const registry = new MemoryNodeRegistry();
    let drained = false;
    const node = await registry.announce({
      id: 'relay-a',
      kind: RELAY_NODE_KIND,
      region: 'eu-1',
      endpoints: [{ transport: 'udp', host: '10.0.0.5', port: 37000 }],
      capacity: 1000,
      load: 3,
      draining: false,
      startedAt: Date.now(),
    });
    try {
      const source = relayAdmin({
        relay: server.relay,
        store: server.store,
        dataplane: server.dataplane,
        nativeMirror: undefined,
        fleet: {
          role: 'relay',
          nodeId: 'relay-a',
          get draining() {
            return drained;
          },
          drain: async () => {
            drained = true;
          },
          fleet: async () => (await registry.live(RELAY_NODE_KIND)).map(fleetView),
        },
      });
      const state = (await source.state()) as any;
      expect(state.nodes).toEqual([
        {
          id: 'relay-a',
          region: 'eu-1',
          endpoints: [{ transport: 'udp', host: '10.0.0.5', port: 37000 }],
          load: 3,
          capacity: 1000,
          allocations: 3,
          draining: false,
          heartbeatAgeMs: expect.any(Number),
        },
      ]);
      expect(state).toMatchObject({ role: 'relay', nodeId: 'relay-a', draining: false });
      expect(await source.actions.drain!.run(undefined)).toEqual({ ok: true });
      expect(drained).toBe(true);
      source.wire?.close();
    } finally {
      await node.stop();
      await registry.close();
    }
  });

  it('streams ticks and state each second, and forgets a client that goes away', async () => {
    const { api, admin } = await setup(dataplane);
    await chat(api);
    const stream = await openStream(`${admin.base}/api/stream?protocol=unity-relay`);
    expect(stream.res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(stream.res.headers.get('access-control-allow-origin')).toBeNull();
    await eventually(() => (stream.events.filter((e) => e.event === 'tick').length >= 2 ? true : undefined));
    const tick = stream.events.find((e) => e.event === 'tick')!.data;
    expect(tick.t).toBeGreaterThan(0);
    expect(tick.servers[0]).toMatchObject({ protocol: 'unity-relay', counters: { open: 2 } });
    const state = stream.events.find((e) => e.event === 'state')!.data;
    expect(state.state.allocations).toHaveLength(2);
    // At most one event of each kind per tick.
    const ticks = stream.events.filter((e) => e.event === 'tick').length;
    expect(stream.events.filter((e) => e.event === 'state').length).toBeLessThanOrEqual(ticks);
    expect(admin.admin.streams).toBe(1);
    await stream.stop();
    await eventually(
      () => (admin.admin.streams === 0 ? true : undefined),
      5000,
      'the stream to be forgotten',
    );
  });
});
