/**
 * No secret reaches the dashboard through the wire view, even where a field name alone does not
 * say so: classic Kerberos tickets over a real PRUDP server, NoxVR tokens inside Reliable
 * entries and segments, and messages that do not decode. Also the admin endpoint's loopback
 * names and its stalled-stream limit.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isLoopbackName } from '../../src/core/admin/hosts.js';
import { wireMessageJson } from '../../src/core/admin/wire-json.js';
import { completeOptions } from '../../src/core/config.js';
import { silentLogger } from '../../src/core/logger.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { WireTap } from '../../src/core/wire-tap.js';
import { noxWireDecoder } from '../../src/protocols/nox-relay/admin.js';
import { noxRelayCodec } from '../../src/protocols/nox-relay/codec.js';
import { rmcAdmin } from '../../src/protocols/rmc/admin.js';
import {
  MemoryStore,
  RESULT_SUCCESS,
  RmcClient,
  RmcServer,
  registerBuiltins,
  rmc,
  rmcServer,
  startRmcTransports,
  TicketGrantingProtocol,
} from '../../src/protocols/rmc/index.js';
import { type Admin, entry, eventually, startAdmin } from './helpers.js';

const KEY = 'yl4NG7qZ';
let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

function tapped(bytes: Buffer, direction: 'client' | 'server' = 'client') {
  const tap = new WireTap();
  tap.arm();
  tap.record(direction, 1, 'tcp', bytes);
  const m = tap.since(0, 1)[0]!;
  tap.close();
  return m;
}

describe('the rmc wire view over a classic PRUDP server', () => {
  it('shows TicketGranting calls with named fields, and never a Kerberos ticket', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'gw-wire-secrets-'));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics, variant: 'classic' });
    const store = new MemoryStore();
    const t = await startRmcTransports(
      server,
      completeOptions('rmc', rmcServer, {
        host: '127.0.0.1',
        port: 0,
        prudpProfile: 'classic',
        prudpAccessKey: KEY,
        transport: 'prudp',
      }),
      { log: silentLogger(), metrics, dataDir },
      store,
      (secureUrl) => registerBuiltins(server, { store, secureUrl }),
    );
    cleanup.push(() => t.close());
    const source = rmcAdmin({ dispatcher: server.dispatcher, variant: 'classic' });
    const running = { endpoints: t.endpoints, admin: source, close: () => t.close() };
    const admin: Admin = await startAdmin([entry(rmc, running, metrics)]);
    cleanup.push(() => admin.admin.close());
    await admin.json('/api/wire/rmc'); // arms the tap

    const client = await RmcClient.connect({
      host: '127.0.0.1',
      port: t.endpoints[0]!.port,
      transport: 'prudp',
      accessKey: KEY,
      variant: 'classic',
    });
    cleanup.push(() => client.close());
    const login = await client.call(TicketGrantingProtocol, 'Login', { strUserName: 'sam' });
    expect(login.retval).toBe(RESULT_SUCCESS);
    const ticket = await client.call(TicketGrantingProtocol, 'RequestTicket', {
      idSource: login.pidPrincipal,
      idTarget: 2,
    });
    const secrets = [login.pbufResponse, ticket.bufResponse];
    for (const s of secrets) expect(s.length).toBeGreaterThan(16);

    const page = await eventually(async () => {
      const w = await admin.json<any>('/api/wire/rmc?limit=500');
      return w.messages.filter((m: any) => m.direction === 'server').length >= 2 ? w : undefined;
    });
    const answers = page.messages.filter((m: any) => m.direction === 'server');
    const loginAnswer = answers.find((m: any) => m.fields.methodId === 1);
    expect(loginAnswer.error).toBeNull();
    // Named fields where the CLI prints classic bodies as hex; the ticket masked.
    expect(loginAnswer.fields.results).toMatchObject({
      pidPrincipal: login.pidPrincipal,
      pbufResponse: '<redacted>',
    });
    const ticketAnswer = answers.find((m: any) => m.fields.methodId === 3);
    expect(ticketAnswer.fields.results).toMatchObject({ bufResponse: '<redacted>' });
    const request = page.messages.find((m: any) => m.direction === 'client' && m.fields.methodId === 1);
    expect(request.fields.args).toEqual({ strUserName: 'sam' });
    const text = JSON.stringify(page);
    for (const s of secrets) {
      expect(text).not.toContain(s.toString('hex'));
      expect(text).not.toContain(s.subarray(0, 12).toString('hex'));
    }
  });
});

describe('the nox-relay wire view', () => {
  const token = 'nox-secret-access-token-42';
  const auth = () =>
    noxRelayCodec.encode(
      { type: 'Authentification', uid: 7, flags: 0, accessToken: token },
      { from: 'client' },
    );

  it('decodes Reliable entries in place, so a token inside one is masked', () => {
    const inner = auth();
    const reliable = noxRelayCodec.encode(
      { type: 'Reliable', uid: 1, messages: [inner.toString('hex')] },
      { from: 'client' },
    );
    const json = wireMessageJson(tapped(reliable), noxWireDecoder, true);
    expect(json.error).toBeNull();
    expect(json.fields).toMatchObject({
      type: 'Reliable',
      messages: [{ type: 'Authentification', uid: 7, accessToken: '<redacted>' }],
    });
    const text = JSON.stringify(json);
    expect(text).not.toContain(token);
    expect(text).not.toContain(Buffer.from(token).toString('hex'));
    // A Reliable entry that is no packet is masked whole.
    const odd = noxRelayCodec.encode(
      { type: 'Reliable', uid: 1, messages: [Buffer.from(`xx${token}`).toString('hex')] },
      { from: 'client' },
    );
    const oddJson = wireMessageJson(tapped(odd), noxWireDecoder, true);
    expect(oddJson.fields).toMatchObject({ type: 'Reliable', messages: ['<redacted>'] });
    expect(oddJson.hex).not.toContain(Buffer.from(token).toString('hex'));
  });

  it('masks segment data, and shows no bytes of a message that does not decode', () => {
    const whole = auth();
    const segment = noxRelayCodec.encode(
      {
        type: 'Segmentation',
        uid: 2,
        segmentId: 1,
        totalSegments: 2,
        currentSegment: 0,
        segmentData: whole.subarray(0, 20).toString('hex'),
      },
      { from: 'client' },
    );
    const seg = wireMessageJson(tapped(segment), noxWireDecoder, true);
    expect(seg.fields).toMatchObject({ type: 'Segmentation', segmentData: '<redacted>' });
    expect(seg.hex).not.toContain(whole.subarray(5, 20).toString('hex'));
    // A cut-off Authentification does not decode: no hex at all.
    const broken = Buffer.concat([whole.subarray(0, whole.length - 3)]);
    broken.writeUInt16BE(whole.length + 10, 0);
    const bad = wireMessageJson(tapped(broken), noxWireDecoder, true);
    expect(bad.fields).toBeNull();
    expect(bad.hex).toBe('');
    expect(bad.error).toMatch(/bytes hidden/);
    // Without hideUndecoded (a protocol with no such secrets), the bytes stay visible.
    expect(wireMessageJson(tapped(broken), noxWireDecoder, false).hex).toBe(broken.toString('hex'));
  });
});

describe('the admin endpoint', () => {
  it('counts only literal loopback names as this machine', () => {
    for (const h of [
      'localhost',
      'LOCALHOST',
      '127.0.0.1',
      '127.255.0.9',
      '::1',
      '0:0:0:0:0:0:0:1',
      '::ffff:127.0.0.1',
    ])
      expect(isLoopbackName(h), h).toBe(true);
    for (const h of [
      '127.0.0.1.evil.example',
      '127.evil.example',
      'localhost.evil.example',
      '128.0.0.1',
      '::2',
      '::ffff:10.0.0.1',
      '0.0.0.0',
      '',
    ])
      expect(isLoopbackName(h), h).toBe(false);
  });

  it('closes an event stream whose client reads nothing, freeing its slot', async () => {
    const metrics = new ProtocolMetrics('js5');
    const tap = new WireTap({ ratePerSecond: 100_000, capacity: 2000 });
    const big = Buffer.alloc(4096, 0x41);
    const server = {
      endpoints: [],
      close: () => {},
      admin: { state: () => ({}), actions: {}, wire: tap, decode: () => ({ type: 'x' }) },
    };
    const e = entry({ name: 'js5', summary: 'test', codecs: [] } as never, server as never, metrics);
    const admin = await startAdmin([e], { tickMs: 20, stalledStreamMs: 300, maxStreams: 1 });
    cleanup.push(() => admin.admin.close());
    const feed = setInterval(() => {
      for (let i = 0; i < 200; i++) tap.record('client', 1, 'tcp', big);
    }, 10);
    cleanup.push(() => clearInterval(feed));
    cleanup.push(() => tap.close());
    // A client that sends its request and then never reads.
    const socket = net.connect(admin.admin.port, '127.0.0.1');
    cleanup.push(() => {
      socket.destroy();
    });
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.pause();
    socket.write('GET /api/stream?wire=js5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    await eventually(() => (admin.admin.streams === 1 ? true : undefined), 5000, 'the stream open');
    // The one slot is taken; then the stalled client is closed and a newcomer gets in.
    expect((await admin.get('/api/stream')).status).toBe(503);
    await eventually(
      () => (admin.admin.streams === 0 ? true : undefined),
      20_000,
      'the stalled stream closed',
    );
    const again = await admin.get('/api/stream');
    expect(again.status).toBe(200);
    await again.body?.cancel();
  }, 30_000);
});
