/**
 * The admin API over a real JS5 server (demo cache) with the real client: connections with
 * queues and bytes served, the archives, the wire view (a request and its response, decoded),
 * and the disconnect action.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { js5Admin } from '../../src/protocols/js5/admin.js';
import { openStore } from '../../src/protocols/js5/cache/store.js';
import { Js5Client } from '../../src/protocols/js5/client.js';
import { js5 } from '../../src/protocols/js5/index.js';
import type { Js5Server } from '../../src/protocols/js5/server.js';
import { demoCache, startServer } from '../protocols/js5/helpers.js';
import { type Admin, entry, eventually, startAdmin } from './helpers.js';

let server: Js5Server | undefined;
let admin: Admin | undefined;
const clients: Js5Client[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
  await admin?.admin.close();
  await server?.close();
  admin = undefined;
  server = undefined;
});

async function setup() {
  const started = await startServer('530');
  server = started.server;
  const running = {
    endpoints: [],
    admin: js5Admin(started.server, openStore(demoCache())),
    close: () => started.server.close(),
  };
  admin = await startAdmin([entry(js5, running, started.metrics)]);
  return { admin, port: started.server.port };
}

async function client(port: number): Promise<Js5Client> {
  const c = await Js5Client.connect({ host: '127.0.0.1', port, build: 530, profile: '530' });
  clients.push(c);
  return c;
}

describe('the admin API over js5', () => {
  it('shows connections with bytes served and the archives of the cache', async () => {
    const { admin, port } = await setup();
    const c = await client(port);
    const master = await c.masterIndex();
    await c.request(255, 2, true);
    const d = await admin.json<any>('/api/servers/js5');
    expect(d.counters.received).toBeGreaterThanOrEqual(2);
    expect(d.counters.bytesSent).toBeGreaterThan(0);
    expect(d.state.connections).toHaveLength(1);
    const conn = d.state.connections[0];
    expect(conn).toMatchObject({ build: 530, urgentQueued: 0, prefetchQueued: 0, inFlight: 0 });
    expect(conn.bytesServed).toBeGreaterThan(0);
    expect(conn.bytesServed).toBe(d.state.bytesServed);
    expect(conn.remote).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(d.state.archives.length).toBeGreaterThan(0);
    const listed = master.entries.filter((e) => e.checksum !== 0 || e.version !== 0).length;
    expect(d.state.archives).toHaveLength(listed);
    const a0 = d.state.archives.find((a: any) => a.id === 0);
    expect(a0.crc).toBe(master.entries[0]!.checksum);
    expect(a0.groups).toBeGreaterThan(0);
    // The stored sizes are read in the background after the first look.
    const done = await eventually(async () => {
      const s = (await admin.json<any>('/api/servers/js5')).state;
      return s.storedBytesComplete ? s : undefined;
    });
    expect(done.archives.find((a: any) => a.id === 0).storedBytes).toBeGreaterThan(0);
  });

  it('the wire view shows a just-sent request and its response, decoded', async () => {
    const { admin, port } = await setup();
    await admin.json('/api/wire/js5');
    const c = await client(port);
    await c.request(255, 3, true);
    const page = await eventually(async () => {
      const w = await admin.json<any>('/api/wire/js5?limit=500');
      return w.messages.some((m: any) => m.direction === 'server' && m.fields?.group === 3) ? w : undefined;
    });
    const req = page.messages.find(
      (m: any) => m.direction === 'client' && m.fields?.type === 'urgent' && m.fields?.group === 3,
    );
    expect(req).toMatchObject({ name: 'urgent', transport: 'tcp', length: 4, error: null, hex: '01ff0003' });
    const res = page.messages.find((m: any) => m.direction === 'server' && m.fields?.group === 3);
    expect(res.error).toBeNull();
    expect(res.fields).toMatchObject({ archive: 255, group: 3 });
  });

  it('disconnect closes that connection', async () => {
    const { admin, port } = await setup();
    const c = await client(port);
    await c.masterIndex();
    const [conn] = (await admin.json<any>('/api/servers/js5')).state.connections;
    expect((await admin.post(`/api/servers/js5/connections/${conn.id}/disconnect`)).status).toBe(200);
    await expect(c.request(255, 2, true)).rejects.toThrow();
    await eventually(async () =>
      (await admin.json<any>('/api/servers/js5')).state.connections.length === 0 ? true : undefined,
    );
    expect((await admin.post('/api/servers/js5/connections/9999/disconnect')).status).toBe(404);
  });
});
