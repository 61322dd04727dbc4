/**
 * The admin API over a real NoxVR relay with real clients: instances, players with their latest
 * Transform, connections, map bounds; disconnect and end-instance really act.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { noxRelayAdmin } from '../../src/protocols/nox-relay/admin.js';
import type { NoxRelayClient } from '../../src/protocols/nox-relay/client.js';
import { noxRelay } from '../../src/protocols/nox-relay/index.js';
import type { NoxRelayServer } from '../../src/protocols/nox-relay/server.js';
import { next, player, startServer } from '../protocols/nox-relay/helpers.js';
import { type Admin, entry, eventually, startAdmin } from './helpers.js';

let server: NoxRelayServer | undefined;
let admin: Admin | undefined;
const clients: NoxRelayClient[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
  await admin?.admin.close();
  await server?.close();
  admin = undefined;
  server = undefined;
});

async function setup() {
  server = await startServer();
  const running = { endpoints: server.endpoints, admin: noxRelayAdmin(server), close: () => server!.close() };
  admin = await startAdmin([entry(noxRelay, running, server.metrics)]);
  return { server, admin };
}

describe('the admin API over nox-relay', () => {
  it('shows instances, players at their latest position, connections and the map bounds', async () => {
    const { admin } = await setup();
    const a = await player(server!, '1');
    clients.push(a);
    const b = await player(server!, '2');
    clients.push(b);
    a.sendTransform(0, 0, {
      position: { x: -4, y: 1.5, z: 2 },
      rotation: { x: 0, y: Math.SQRT1_2, z: 0, w: Math.SQRT1_2 },
    });
    b.sendTransform(0, 0, { position: { x: 3, y: 0, z: -6 } });
    a.sendTransform(0, 0, { position: { x: -5, y: 1.5, z: 2.5 } });
    const state = await eventually(
      async () => {
        const d = await admin.json<any>('/api/servers/nox-relay');
        const players = d.state.instances[0].players;
        return players.length === 2 &&
          players.every((p: any) => p.position !== null) &&
          players.some((p: any) => p.position.x === -5)
          ? d.state
          : undefined;
      },
      8000,
      'both players with positions',
    );
    expect(state.instances).toHaveLength(1);
    expect(state.instances[0]).toMatchObject({ id: '0', name: 'default' });
    const pa = state.instances[0].players.find((p: any) => p.position.x === -5);
    expect(pa.position).toEqual({ x: -5, y: 1.5, z: 2.5 });
    expect(pa.rotation.w).toBeCloseTo(Math.SQRT1_2, 3);
    expect(typeof pa.id).toBe('string');
    expect(pa.bot).toBe(false);
    expect(typeof pa.connection).toBe('string');
    expect(pa.updatedAt).toBeGreaterThan(Date.now() - 60_000);
    expect(state.connections).toHaveLength(2);
    for (const c of state.connections) {
      expect(c).toMatchObject({ transport: 'tcp', remote: expect.stringMatching(/^127\.0\.0\.1:\d+$/) });
      expect(c.playerId).not.toBeNull();
      expect(c.since).toBeGreaterThan(Date.now() - 60_000);
    }
    expect(state.bounds).toEqual({ minX: -5, maxX: 3, minZ: -6, maxZ: 2.5 });
    const list = await admin.json<any>('/api/servers');
    expect(list.servers[0].counters.open).toBe(2);
    expect(list.servers[0].counters.received).toBeGreaterThan(0);
  });

  it('the wire view shows a just-sent Transform decoded, and masks the auth token', async () => {
    const { admin } = await setup();
    await admin.json('/api/wire/nox-relay');
    const a = await player(server!, 'secret-nox-token-1');
    clients.push(a);
    a.sendTransform(0, 0, { position: { x: 7.5, y: 1, z: -3 } });
    const page = await eventually(
      async () => {
        const w = await admin.json<any>('/api/wire/nox-relay?limit=500');
        return w.messages.some((m: any) => JSON.stringify(m.fields ?? null).includes('7.5')) ? w : undefined;
      },
      8000,
      'the Transform in the wire view',
    );
    const t = page.messages.find((m: any) => JSON.stringify(m.fields ?? null).includes('7.5'));
    expect(t).toMatchObject({ direction: 'client', transport: 'tcp', error: null });
    expect(t.name).toMatch(/Transform/);
    expect(page.messages.some((m: any) => m.direction === 'server')).toBe(true);
    const text = JSON.stringify(page);
    expect(text).toContain('<redacted>');
    expect(text).not.toContain('secret-nox-token-1');
    expect(text).not.toContain(Buffer.from('secret-nox-token-1').toString('hex'));
  });

  it('disconnect closes that connection: the client is told and the others stay', async () => {
    const { admin } = await setup();
    const a = await player(server!, '1');
    clients.push(a);
    const b = await player(server!, '2');
    clients.push(b);
    const state = (await admin.json<any>('/api/servers/nox-relay')).state;
    const ids: string[] = state.connections.map((c: any) => c.id);
    expect(ids).toHaveLength(2);
    const told = next<string>(a, 'disconnect', () => true, 5000);
    const closed = new Promise<void>((resolve) => a.once('close', () => resolve()));
    // Which id is a's: the one whose player is the first to have entered.
    const aConn = state.instances[0].players.find((p: any) => p.id === '0').connection;
    expect((await admin.post(`/api/servers/nox-relay/connections/${aConn}/disconnect`)).status).toBe(200);
    expect(await told).toMatch(/administrator/);
    await closed;
    const after = (await admin.json<any>('/api/servers/nox-relay')).state;
    expect(after.connections.map((c: any) => c.id)).toEqual(ids.filter((id) => id !== aConn));
    expect((await admin.post('/api/servers/nox-relay/connections/999/disconnect')).status).toBe(404);
  });

  it('end instance makes every player leave it', async () => {
    const { admin } = await setup();
    const a = await player(server!, '1');
    clients.push(a);
    const b = await player(server!, '2');
    clients.push(b);
    const quit = next<any>(a, 'message', (m) => m.type === 'Quit', 5000);
    expect((await admin.post('/api/servers/nox-relay/instances/0/end')).status).toBe(200);
    expect((await quit).reason).toMatch(/ended/);
    const after = (await admin.json<any>('/api/servers/nox-relay')).state;
    expect(after.instances[0].players).toEqual([]);
    // The connections stay: the players may enter again.
    expect(after.connections).toHaveLength(2);
    expect((await admin.post('/api/servers/nox-relay/instances/77/end')).status).toBe(404);
  });
});
