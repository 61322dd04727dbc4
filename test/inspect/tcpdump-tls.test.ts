/**
 * TLS and DTLS records, from real OpenSSL sessions captured with tcpdump: the inspector shows
 * the record headers and the handshake types sent in clear, and everything protected as
 * `encrypted: true`, never a guessed content.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/wait.js';
import { haveProgram, inspectJson, Tcpdump, tempDir } from './helpers.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');
const HAVE_OPENSSL = haveProgram('openssl');

const cleanups: (() => unknown)[] = [];
afterEach(() => {
  for (const f of cleanups.splice(0).reverse()) f();
});

async function freePort(udp: boolean): Promise<number> {
  if (udp) {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    const port = s.address().port;
    await new Promise<void>((r) => s.close(() => r()));
    return port;
  }
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

async function session(dtls: boolean): Promise<{ file: string; port: number }> {
  const dir = tempDir();
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  const made = spawnSync('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    key,
    '-out',
    cert,
    '-days',
    '1',
    '-subj',
    '/CN=localhost',
  ]);
  expect(made.status).toBe(0);
  const port = await freePort(dtls);
  const dump = await Tcpdump.start(`${dtls ? 'udp' : 'tcp'} port ${port}`, path.join(dir, 'tls.pcap'));
  cleanups.push(() => dump.kill());
  const flag = dtls ? ['-dtls1_2'] : [];
  // s_server stops when its stdin ends: keep it open until the test is done.
  const server: ChildProcess = spawn(
    'openssl',
    ['s_server', ...flag, '-accept', `127.0.0.1:${port}`, '-cert', cert, '-key', key],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  cleanups.push(() => server.kill('SIGKILL'));
  let served = '';
  server.stdout!.on('data', (d: Buffer) => {
    served += d.toString();
  });
  await waitFor(() => served.includes('ACCEPT'), { what: () => `s_server listening (${served})` });
  const client = spawn('openssl', ['s_client', ...flag, '-connect', `127.0.0.1:${port}`], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  cleanups.push(() => client.kill('SIGKILL'));
  let connected = '';
  client.stdout!.on('data', (d: Buffer) => {
    connected += d.toString();
  });
  client.stderr!.on('data', () => {});
  await waitFor(() => connected.includes('CONNECTED'), { what: () => `s_client connected (${connected})` });
  client.stdin!.write('hello over tls\n');
  await waitFor(() => served.includes('hello over tls'), {
    what: () => `the data at the OpenSSL server (${served})`,
    timeoutMs: 15_000,
  });
  // s_client sends its close_notify and exits when its stdin ends; stop() then waits for the file.
  const exited = new Promise((r) => client.once('exit', r));
  client.stdin!.end();
  await exited;
  await dump.stop();
  return { file: dump.file, port };
}

describe('inspect: TLS and DTLS records shown as encrypted', () => {
  it('TLS over TCP: clear handshake types, then only encrypted records', async (ctx) => {
    if (!HAVE_TCPDUMP || !HAVE_OPENSSL) return ctx.skip();
    const { file, port } = await session(false);
    const records = inspectJson(file, ['--port', `${port}/tcp=tls`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const up = records.filter((r) => r.direction === 'client').map((r) => r.message);
    const down = records.filter((r) => r.direction === 'server').map((r) => r.message);
    expect(up[0]).toMatchObject({ type: 'handshake', handshakeType: 'client_hello' });
    expect(down[0]).toMatchObject({ type: 'handshake', handshakeType: 'server_hello' });
    for (const side of [up, down]) {
      const ccs = side.findIndex((m) => m.type === 'change_cipher_spec');
      // Whatever follows a side's ChangeCipherSpec is protected, and shown only as such.
      for (const m of side.slice(ccs + 1)) {
        expect(m.encrypted).toBe(true);
        expect(m.handshakeType).toBeUndefined();
      }
      expect(side.some((m) => m.type === 'application_data')).toBe(true);
    }
  });

  it('DTLS over UDP: epoch 0 in clear (hello verify, fragments), later epochs encrypted', async (ctx) => {
    if (!HAVE_TCPDUMP || !HAVE_OPENSSL) return ctx.skip();
    const { file } = await session(true);
    // No --port: a DTLS ClientHello identifies the flow.
    const records = inspectJson(file);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    expect(records.every((r) => r.protocol === 'dtls' && r.transport === 'udp')).toBe(true);
    const first = records[0]!;
    expect(first.direction).toBe('client');
    expect(first.message).toMatchObject({ type: 'handshake', handshakeType: 'client_hello', epoch: 0 });
    expect(
      records.some((r) => r.message.handshakeType === 'hello_verify_request' && r.direction === 'server'),
    ).toBe(true);
    for (const r of records) {
      if (r.message.epoch > 0) {
        expect(r.message.encrypted).toBe(true);
        expect(r.message.handshakeType).toBeUndefined();
      }
    }
    expect(records.some((r) => r.message.type === 'application_data' && r.direction === 'client')).toBe(true);
  });
});
