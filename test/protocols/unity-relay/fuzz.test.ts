/**
 * Fuzzing the relay: datagrams that are random, or valid messages with random damage, from
 * bound and unknown sources. The relay never throws, never counts an internal error, and never
 * answers a datagram with more bytes than it carried.
 *
 * Datagrams are delivered through the socket's own 'message' listener (the path a real socket
 * takes, with its guard), so a handler that throws shows up as an `internal_error` drop instead of
 * escaping: the `internal_error` assertion can fail.
 */
import type dgram from 'node:dgram';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { AllocationStore, RelayServer, startUnityRelay } from '../../../src/protocols/unity-relay/index.js';
import {
  type AllocationJson,
  Peer,
  UtpDriver,
  utpBind,
  utpClose,
  utpConnectRequest,
  utpDisconnect,
  utpPing,
  utpRelay,
} from './utp.js';

interface Sent {
  bytes: Buffer;
  port: number;
  address: string;
}

type Listener = (msg: Buffer, rinfo: dgram.RemoteInfo) => void;

/** A socket stand-in that records what is sent and keeps the relay's 'message' listener. */
function fakeSocket(sent: Sent[], listeners: Listener[]): dgram.Socket {
  return {
    on(event: string, listener: Listener) {
      if (event === 'message') listeners.push(listener);
      return this;
    },
    off() {
      return this;
    },
    send(bytes: Buffer, port: number, address: string) {
      sent.push({ bytes: Buffer.from(bytes), port, address });
    },
  } as unknown as dgram.Socket;
}

const HOST = { address: '10.0.0.1', port: 1000 };
const CLIENT = { address: '10.0.0.2', port: 2000 };
const STRANGER = { address: '10.0.0.3', port: 3000 };

function setup() {
  const sent: Sent[] = [];
  const listeners: Listener[] = [];
  const store = new AllocationStore();
  const metrics = new ProtocolMetrics('unity-relay');
  const relay = new RelayServer(fakeSocket(sent, listeners), store, metrics, silentLogger(), {
    errorBurst: 1000,
    errorRatePerSecond: 1000,
  });
  expect(listeners).toHaveLength(1);
  /** Delivers a datagram the way the socket does: through the relay's 'message' listener. */
  const deliver = (bytes: Buffer, from: { address: string; port: number }) => {
    for (const l of listeners)
      l(bytes, { address: from.address, port: from.port, family: 'IPv4', size: bytes.length });
  };
  const host = store.allocateHost(2, 'local-1');
  const client = store.join(store.joinCodeFor(host).code)!;
  deliver(utpBind(0, host.connectionData, host.key), HOST);
  deliver(utpBind(0, client.connectionData, client.key), CLIENT);
  deliver(utpConnectRequest(client.id, host.connectionData), CLIENT);
  expect(host.peers.has(client)).toBe(true);
  sent.length = 0;
  return { sent, store, metrics, relay, host, client, deliver };
}

describe('unity-relay fuzz (handler level)', () => {
  it('random and damaged datagrams: no throw, no internal error, no reply larger than the datagram', () => {
    const ids = (s: ReturnType<typeof setup>) => [s.host.id, s.client.id, Buffer.alloc(16, 0x5a)];
    const source = fc.constantFrom(HOST, CLIENT, STRANGER);
    // A recipe, turned into bytes once the allocations of the run exist.
    const recipe = fc.record({
      kind: fc.integer({ min: 0, max: 8 }),
      from: fc.nat(2),
      to: fc.nat(2),
      nonce: fc.nat(0xffff),
      content: fc.uint8Array({ maxLength: 1500 }),
      flips: fc.array(fc.tuple(fc.nat(2000), fc.nat(255)), { maxLength: 4 }),
      truncate: fc.option(fc.nat(300)),
      source,
    });
    fc.assert(
      fc.property(fc.array(recipe, { minLength: 1, maxLength: 25 }), (recipes) => {
        const s = setup();
        try {
          const pool = ids(s);
          for (const r of recipes) {
            const from = pool[r.from]!;
            const to = pool[r.to]!;
            const alloc = r.from === 0 ? s.host : s.client;
            const content = Buffer.from(r.content);
            let bytes: Buffer;
            switch (r.kind) {
              case 0:
                bytes = content;
                break;
              case 1:
                bytes = utpBind(r.nonce, alloc.connectionData, alloc.key);
                break;
              case 2:
                bytes = utpPing(from);
                break;
              case 3:
                bytes = utpConnectRequest(from, (r.to === 0 ? s.host : s.client).connectionData);
                break;
              case 4:
                bytes = utpDisconnect(from, to);
                break;
              case 5:
                bytes = utpClose(from);
                break;
              default:
                bytes = utpRelay(from, to, content);
            }
            for (const [at, v] of r.flips) if (bytes.length > 0) bytes[at % bytes.length] = v;
            if (r.truncate !== null) bytes = bytes.subarray(0, r.truncate);
            const before = s.sent.length;
            const boundAddresses = new Set(
              [...s.store.live()].filter((a) => a.state === 'bound').map((a) => `${a.address}:${a.port}`),
            );
            const sourceWasBound = boundAddresses.has(`${r.source.address}:${r.source.port}`);
            s.deliver(bytes, r.source);
            for (const out of s.sent.slice(before)) {
              if (out.address === r.source.address && out.port === r.source.port) {
                // An address nobody proved (by BIND) is never sent more than it sent.
                if (!sourceWasBound) expect(out.bytes.length).toBeLessThanOrEqual(bytes.length);
              } else {
                // Anything else goes only to addresses that were bound.
                expect(boundAddresses.has(`${out.address}:${out.port}`)).toBe(true);
              }
              // Whatever leaves is a well-formed relay message.
              expect(out.bytes.subarray(0, 3).toString('hex')).toBe('da7200');
            }
          }
          expect(s.metrics.dropped.get('internal_error')).toBeUndefined();
        } finally {
          s.relay.stop();
        }
      }),
      { numRuns: 600 },
    );
  });
});

describe('unity-relay fuzz harness', () => {
  it('a handler that throws is counted as internal_error on the delivery path the fuzz test uses', () => {
    const s = setup();
    try {
      // Simulate a bug in a handler: the store throws for any lookup.
      s.store.find = () => {
        throw new Error('simulated bug');
      };
      expect(() => s.deliver(utpPing(s.host.id), HOST)).not.toThrow();
      expect(s.metrics.dropped.get('internal_error')).toBe(1);
    } finally {
      s.relay.stop();
    }
  });
});

describe('unity-relay fuzz (real sockets)', () => {
  it('a burst of random datagrams does not crash the server, gets no larger replies, and traffic still flows', async () => {
    const server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0 });
    const peers: Peer[] = [];
    try {
      const res = await fetch(`${server.apiUrl}/v1/allocate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ maxConnections: 2 }),
      });
      const allocation = ((await res.json()) as { data: { allocation: AllocationJson } }).data.allocation;
      const host = await UtpDriver.create(allocation);
      peers.push(host.peer);
      expect(await host.bind()).toBe(true);
      const fuzzer = await Peer.open('127.0.0.1', server.udpPort);
      peers.push(fuzzer);
      const samples = fc.sample(
        fc.oneof(
          fc.uint8Array({ maxLength: 1600 }),
          fc.uint8Array({ maxLength: 400 }).map((b) => Uint8Array.from([0xda, 0x72, 0, b[0] ?? 0, ...b])),
          fc
            .uint8Array({ maxLength: 300 })
            .map((b) => Buffer.concat([utpPing(host.id).subarray(0, 20), Buffer.from(b)])),
        ),
        1500,
      );
      for (const s of samples) fuzzer.send(Buffer.from(s));
      const replies = await fuzzer.drain(400);
      // Each reply is a PING echo (same size) or a 21-byte ERROR for ≥ 22-byte messages.
      for (const r of replies) expect(r.length === 22 || r.length === 21).toBe(true);
      expect(server.metrics.dropped.get('internal_error')).toBeUndefined();
      expect(server.metrics.received).toBeGreaterThan(1000);
      // Still serving.
      host.peer.send(utpPing(host.id));
      expect(await host.peer.nextOfType(2)).toBeDefined();
    } finally {
      await Promise.all(peers.map((p) => p.close()));
      await server.close();
    }
  });
});
