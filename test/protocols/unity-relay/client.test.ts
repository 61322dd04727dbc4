/** UnityRelayClient against the real relay, and against a stub that checks its BIND retries. */
import { createHmac } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  RelayApiClient,
  RelayApiError,
  RelayClientError,
  relayServerData,
  startUnityRelay,
  UnityRelayClient,
  type UnityRelayInstance,
} from '../../../src/protocols/unity-relay/index.js';
import { elapse } from '../../helpers/wait.js';

let server: UnityRelayInstance | undefined;
const clients: UnityRelayClient[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await server?.close();
  server = undefined;
});

const once = <T extends unknown[]>(emitter: UnityRelayClient, event: string, ms = 2000): Promise<T> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} within ${ms} ms`)), ms);
    emitter.once(event, (...args: unknown[]) => {
      clearTimeout(timer);
      resolve(args as T);
    });
  });

async function setup(options = {}) {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, ...options });
  return new RelayApiClient(server.apiUrl);
}

const fast = { retryMs: 100, pingIntervalMs: 3000 };

describe('UnityRelayClient', () => {
  it('a host and two clients chat through the relay, with events', async () => {
    const api = await setup();
    const { client: host, joinCode } = await UnityRelayClient.host(api, 4, fast);
    clients.push(host);
    expect(host.state).toBe('bound');
    const a = await UnityRelayClient.join(api, joinCode, fast);
    clients.push(a);
    const b = await UnityRelayClient.join(api, joinCode, fast);
    clients.push(b);
    expect(a.hostId!.equals(host.allocationId)).toBe(true);

    const peerEvent = once<[Buffer]>(host, 'peer');
    const msgEvent = once<[Buffer, Buffer]>(host, 'message');
    a.send(Buffer.from('hello from a'));
    const [peer] = await peerEvent;
    const [data, from] = await msgEvent;
    expect(peer.equals(a.allocationId)).toBe(true);
    expect(data.toString()).toBe('hello from a');
    expect(from.equals(a.allocationId)).toBe(true);

    const atB = once<[Buffer]>(b, 'message');
    b.send(Buffer.from('b here'));
    await once(host, 'message');
    host.send(Buffer.alloc(1362, 7), b.allocationId);
    const [big] = await atB;
    expect(big).toHaveLength(1362);

    // Datagrams that do not come from the relay are ignored (a spoofed RELAY straight to the host).
    const stranger = dgram.createSocket('udp4');
    let spoofed = false;
    const onSpoof = (d: Buffer) => {
      if (d.toString() === 'spoofed') spoofed = true;
    };
    host.on('message', onSpoof);
    const fake = Buffer.concat([
      Buffer.from('da72000a', 'hex'),
      a.allocationId,
      host.allocationId,
      Buffer.from([0, 7]),
      Buffer.from('spoofed'),
    ]);
    await new Promise<void>((r) => stranger.send(fake, host.localPort, '127.0.0.1', () => r()));
    a.send(Buffer.from('after'));
    expect((await once<[Buffer]>(host, 'message'))[0].toString()).toBe('after');
    expect(spoofed).toBe(false);
    host.off('message', onSpoof);
    stranger.close();

    // Disconnect: the host hears it, and the link is gone (ERROR 5 afterwards).
    const gone = once<[Buffer]>(host, 'disconnect');
    a.disconnect();
    expect((await gone)[0].equals(a.allocationId)).toBe(true);
    const err = once<[number]>(host, 'relayError');
    host.send(Buffer.from('?'), a.allocationId);
    expect((await err)[0]).toBe(5);
  });

  it('keeps the binding alive with PINGs', async () => {
    const api = await setup({ idleTimeoutMs: 300, hostAloneTimeoutMs: 300 });
    const { client: host } = await UnityRelayClient.host(api, 1, { retryMs: 100, pingIntervalMs: 80 });
    clients.push(host);
    await once(host, 'ping');
    await elapse(700, 'more than twice the idle timeout: the PINGs must keep the binding');
    // Still bound well past the idle timeout.
    expect([...server!.store.live()].map((a) => a.state)).toEqual(['bound']);
    expect(server!.metrics.closed.get('idle_timeout')).toBeUndefined();
  });

  it('re-binds after 3 silent ping periods, like UTP 2.x, and learns of an expired allocation (ERROR 4)', async () => {
    const api = await setup();
    const { client, allocation } = await UnityRelayClient.host(api, 1, { retryMs: 100, pingIntervalMs: 60 });
    clients.push(client);
    await once(client, 'ping');
    const nonce = client.nonce;
    // The allocation ends behind the client's back: the relay now ignores its PINGs.
    server!.store.expire(server!.store.byGuid(allocation.allocationId)!);
    const [reason] = await once<[string]>(client, 'rebind', 2000);
    expect(reason).toBe('silence');
    expect(client.nonce).toBe(nonce); // the same nonce, as UTP does on this path
    const [code] = await once<[number]>(client, 'relayError', 2000);
    expect(code).toBe(4);
  });

  it('connect is rejected when the host is full, and by ERROR 6 on self-connect', async () => {
    const api = await setup();
    const { client: host, joinCode, allocation } = await UnityRelayClient.host(api, 1, fast);
    clients.push(host);
    clients.push(await UnityRelayClient.join(api, joinCode, fast));
    const late = new UnityRelayClient(relayServerData(await api.join(joinCode)), fast);
    clients.push(late);
    await late.bind();
    await expect(late.connect()).rejects.toThrow(/REJECTED/);
    const self = new UnityRelayClient(relayServerData(allocation), fast);
    clients.push(self);
    // The host's allocation from a new address: nonce 0 is stale (dropped), nonce 1 moves the binding.
    await self.bind();
    expect(self.nonce).toBe(2);
    await expect(self.connect()).rejects.toThrow(/ERROR 6/);
  }, 10_000);

  it('API errors surface as RelayApiError', async () => {
    const api = await setup();
    await expect(api.join('ZZZZZZ')).rejects.toBeInstanceOf(RelayApiError);
    await expect(api.allocate(0)).rejects.toMatchObject({ status: 400 });
    expect(await api.regions()).toHaveLength(1);
  });
});

describe('UnityRelayClient against a stub relay', () => {
  it('retries BIND every retryMs, incrementing the nonce, each with a valid HMAC; re-binds on ERROR 3', async () => {
    const stub = dgram.createSocket('udp4');
    await new Promise<void>((r) => stub.bind(0, '127.0.0.1', () => r()));
    const key = Buffer.alloc(64, 3);
    const id = Buffer.alloc(16, 1);
    const nonces: number[] = [];
    let hmacOk = true;
    let sendError3: (() => void) | undefined;
    stub.on('message', (msg, rinfo) => {
      if (msg[3] !== 0) return;
      nonces.push(msg.readUInt16LE(5));
      hmacOk &&= createHmac('sha256', key).update(msg.subarray(0, 263)).digest().equals(msg.subarray(263));
      sendError3 = () =>
        stub.send(
          Buffer.concat([Buffer.from('da72000c', 'hex'), id, Buffer.from([3])]),
          rinfo.port,
          rinfo.address,
        );
      if (nonces.length === 3 || nonces.length === 4)
        stub.send(Buffer.from('da720001', 'hex'), rinfo.port, rinfo.address);
    });
    const client = new UnityRelayClient(
      {
        host: '127.0.0.1',
        port: stub.address().port,
        allocationId: id,
        key,
        connectionData: Buffer.alloc(255, 9),
        hostConnectionData: Buffer.alloc(255, 9),
      },
      { retryMs: 200 }, // generous: after ERROR 3 the stub must answer before the next retry
    );
    clients.push(client);
    try {
      await client.bind();
      expect(nonces).toEqual([0, 1, 2]);
      const rebind = once<[string]>(client, 'rebind');
      sendError3!();
      expect((await rebind)[0]).toBe('error 3');
      await once(client, 'bound');
      expect(nonces).toEqual([0, 1, 2, 3]);
      expect(hmacOk).toBe(true);
    } finally {
      await new Promise<void>((r) => stub.close(() => r()));
    }
  });

  /** A stub relay on 127.0.0.1 that records every BIND (nonce, HMAC validity) and lets the test answer. */
  async function stubRelay(onBind: (nonce: number, reply: (hex: string) => void) => void) {
    const stub = dgram.createSocket('udp4');
    await new Promise<void>((r) => stub.bind(0, '127.0.0.1', () => r()));
    const key = Buffer.alloc(64, 5);
    const id = Buffer.alloc(16, 2);
    const nonces: number[] = [];
    let hmacOk = true;
    let last: dgram.RemoteInfo | undefined;
    const send = (hex: string, to: dgram.RemoteInfo) =>
      stub.send(Buffer.from(hex, 'hex'), to.port, to.address);
    stub.on('message', (msg, rinfo) => {
      if (msg[3] !== 0) return;
      last = rinfo;
      nonces.push(msg.readUInt16LE(5));
      hmacOk &&= createHmac('sha256', key).update(msg.subarray(0, 263)).digest().equals(msg.subarray(263));
      onBind(msg.readUInt16LE(5), (hex) => send(hex, rinfo));
    });
    const data = {
      host: '127.0.0.1',
      port: stub.address().port,
      allocationId: id,
      key,
      connectionData: Buffer.alloc(255, 9),
      hostConnectionData: Buffer.alloc(255, 9),
    };
    return {
      data,
      nonces,
      hmacOk: () => hmacOk,
      /** Sends ERROR 3 to whoever sent the last BIND. */
      error3: () => send(`da72000c${id.toString('hex')}03`, last!),
      close: () => new Promise<void>((r) => stub.close(() => r())),
    };
  }

  const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
    Promise.race([
      p,
      new Promise<T>((_, reject) =>
        setTimeout(() => reject(new Error(`${what}: not settled within ${ms} ms`)), ms),
      ),
    ]);

  it('after ERROR 3 a lost BIND is sent again (the bind retry loop), nonce + 1 each time', async () => {
    let phase: 'initial' | 'afterError3' = 'initial';
    let dropped = 0;
    const stub = await stubRelay((_nonce, reply) => {
      if (phase === 'afterError3' && dropped++ === 0) return; // the first BIND after ERROR 3 is lost
      reply('da720001');
    });
    const client = new UnityRelayClient(stub.data, { retryMs: 150 });
    clients.push(client);
    try {
      await client.bind();
      const sentBefore = stub.nonces.length;
      const nonceAtError = client.nonce;
      phase = 'afterError3';
      const rebind = once<[string]>(client, 'rebind');
      const bound = once(client, 'bound', 3000);
      stub.error3();
      expect((await rebind)[0]).toBe('error 3');
      await bound;
      expect(client.state).toBe('bound');
      const after = stub.nonces.slice(sentBefore);
      expect(after.length).toBeGreaterThanOrEqual(2); // the lost one, then the retry
      expect(after).toEqual(after.map((_, i) => nonceAtError + i)); // one nonce per BIND sent
      expect(stub.hmacOk()).toBe(true);
    } finally {
      await stub.close();
    }
  });

  it('bind() that gives up releases the keep-alive timer and socket; bind() can run again', async () => {
    let answer = false;
    const stub = await stubRelay((_nonce, reply) => {
      if (answer) reply('da720001');
    });
    const client = new UnityRelayClient(stub.data, { retryMs: 40, maxAttempts: 3 });
    clients.push(client);
    const internals = client as unknown as { keepAlive: unknown; socket: unknown };
    try {
      const failed = once<[Error]>(client, 'bindFailed', 3000);
      await expect(client.bind()).rejects.toThrow(/did not answer 3 BIND/);
      expect((await failed)[0].message).toMatch(/did not answer 3 BIND/);
      expect(client.state).toBe('idle');
      expect(internals.keepAlive).toBeUndefined();
      expect(internals.socket).toBeUndefined();
      await elapse(200, 'nothing may be sent after giving up');
      expect(stub.nonces).toEqual([0, 1, 2]); // nothing sent after giving up
      answer = true;
      await client.bind();
      expect(client.state).toBe('bound');
      expect(stub.nonces[3]).toBe(3);
    } finally {
      await stub.close();
    }
  });

  it('bind() and connect() while one is in progress share it (no orphaned promise, one retry loop)', async () => {
    const stub = await stubRelay((_nonce, reply) => {
      if (stub.nonces.length >= 2) reply('da720001'); // answer from the second BIND on
    });
    const client = new UnityRelayClient(stub.data, { retryMs: 100 });
    clients.push(client);
    try {
      const first = client.bind();
      const second = client.bind();
      await within(Promise.all([first, second]), 3000, 'both bind() calls');
      expect(client.state).toBe('bound');
      expect(new Set(stub.nonces).size).toBe(stub.nonces.length); // one loop: no nonce sent twice
      expect(stub.nonces.slice(0, 2)).toEqual([0, 1]);
    } finally {
      await stub.close();
    }

    const api = await setup();
    const { client: host, joinCode } = await UnityRelayClient.host(api, 2, fast);
    clients.push(host);
    const c = new UnityRelayClient(relayServerData(await api.join(joinCode)), fast);
    clients.push(c);
    await c.bind();
    const [a, b] = await within(Promise.all([c.connect(), c.connect()]), 3000, 'both connect() calls');
    expect(a.equals(host.allocationId)).toBe(true);
    expect(b.equals(host.allocationId)).toBe(true);
  });
});

describe('UnityRelayClient notices a dead relay (relayTimeoutMs)', () => {
  const quick = { retryMs: 100, pingIntervalMs: 100, relayTimeoutMs: 800 };

  for (const connectionType of ['udp', 'ws'] as const) {
    it(`over ${connectionType}: the relay stops, host and client emit relayLost and close; calls after that are typed errors`, async () => {
      const api = await setup({ wsPort: 0 });
      const { client: host, joinCode } = await UnityRelayClient.host(api, 2, { ...quick, connectionType });
      clients.push(host);
      const player = await UnityRelayClient.join(api, joinCode, { ...quick, connectionType });
      clients.push(player);
      const hostLost = once<[RelayClientError]>(host, 'relayLost', 10_000);
      const playerLost = once<[RelayClientError]>(player, 'relayLost', 10_000);
      const relayPort = player.data.port;
      await server!.close();
      server = undefined;
      // Sending while the relay is silent but not yet given up on: no throw (the datagram is lost).
      expect(() => player.send(Buffer.from('anyone?'))).not.toThrow();
      for (const [client, lost] of [
        [host, hostLost],
        [player, playerLost],
      ] as const) {
        const [err] = await lost;
        expect(err).toBeInstanceOf(RelayClientError);
        expect(err.code).toBe('ERR_RELAY_LOST');
        expect(err.message).toContain(`127.0.0.1:${relayPort} (${connectionType})`);
        expect(client.state).toBe('closed');
        // Typing after the relay is gone: the same typed error, never "not bound".
        expect(() => client.send(Buffer.from('late'), client.allocationId)).toThrow(
          expect.objectContaining({ code: 'ERR_RELAY_LOST' }),
        );
        expect(() => client.disconnect(client.allocationId)).not.toThrow();
        await expect(client.bind()).rejects.toMatchObject({ code: 'ERR_RELAY_LOST' });
        await client.close();
      }
    }, 20_000);
  }

  it('a live relay that only answers PINGs and re-BINDs is never given up on, even while the client only sends', async () => {
    const api = await setup();
    const patient = { retryMs: 100, pingIntervalMs: 200, relayTimeoutMs: 1500 };
    const { client: host, joinCode } = await UnityRelayClient.host(api, 2, patient);
    clients.push(host);
    const player = await UnityRelayClient.join(api, joinCode, patient);
    clients.push(player);
    let lost = false;
    for (const c of [host, player]) c.on('relayLost', () => (lost = true));
    const rebinds: string[] = [];
    player.on('rebind', (why: string) => rebinds.push(why));
    // The player sends every 50 ms (so it never PINGs) and the host never answers: all the player
    // hears for 4 s is the relay's answer to its re-BIND after 3 silent ping periods.
    const stop = Date.now() + 4000;
    while (Date.now() < stop) {
      player.send(Buffer.from('tick'));
      await elapse(50, 'the player sends every 50 ms for 4 s');
    }
    expect(rebinds.filter((r) => r === 'silence').length).toBeGreaterThanOrEqual(2);
    expect(lost).toBe(false);
    expect(player.state).toBe('bound');
    expect(host.state).toBe('bound');
  }, 20_000);

  it('relayTimeoutMs must exceed 3 ping periods (0 never gives up)', () => {
    const data = {
      host: '127.0.0.1',
      port: 1,
      allocationId: Buffer.alloc(16),
      key: Buffer.alloc(64),
      connectionData: Buffer.alloc(255),
      hostConnectionData: Buffer.alloc(255),
    };
    expect(() => new UnityRelayClient(data, { pingIntervalMs: 300, relayTimeoutMs: 900 })).toThrow(
      expect.objectContaining({ code: 'ERR_CONFIG', key: 'relayTimeoutMs' }),
    );
    expect(() => new UnityRelayClient(data, { pingIntervalMs: 300, relayTimeoutMs: 901 })).not.toThrow();
    expect(() => new UnityRelayClient(data, { pingIntervalMs: 300, relayTimeoutMs: 0 })).not.toThrow();
    // The defaults: 30 s against 3 × 3 s.
    expect(() => new UnityRelayClient(data)).not.toThrow();
    expect(() => new UnityRelayClient(data, { pingIntervalMs: 10_000 })).toThrow(
      expect.objectContaining({ code: 'ERR_CONFIG' }),
    );
  });
});

describe('RelayApiClient timeout', () => {
  it('an API that accepts and never answers fails with ERR_RELAY_API_TIMEOUT naming it; a real one answers within it', async () => {
    const silent = net.createServer((s) => s.on('data', () => {}));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
    try {
      const err = await new RelayApiClient(url, { timeoutMs: 300 }).allocate(1).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RelayClientError);
      expect(err).toMatchObject({ code: 'ERR_RELAY_API_TIMEOUT' });
      expect((err as Error).message).toContain(`${url} did not answer POST /v1/allocate within 300 ms`);
    } finally {
      silent.close();
    }
    const api = await setup();
    const live = new RelayApiClient(api.baseUrl, { timeoutMs: 5000 });
    expect((await live.regions())[0]!.id).toBe('local-1');
  });
});
