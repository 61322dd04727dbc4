/**
 * `gamewire conform unity-relay`: every check passes against gamewire's relay over every
 * transport, and each rule broken on purpose (a proxy in front of the real relay that rewrites
 * one thing, the real relay with one timeout set wrong, or a small fake DTLS server) makes
 * exactly the check for that rule fail, with evidence that points at it.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type CheckResult, runChecks } from '../../../src/core/conform.js';
import { silentLogger } from '../../../src/core/logger.js';
import type { ConnectionType } from '../../../src/protocols/unity-relay/client.js';
import { startUnityRelay, type UnityRelayInstance } from '../../../src/protocols/unity-relay/composition.js';
import { unityRelayConform } from '../../../src/protocols/unity-relay/conform/index.js';
import { bindHmac } from '../../../src/protocols/unity-relay/messages.js';
import { DtlsServer } from '../../../src/transports/dtls/index.js';
import { TcpHeadProxy, type UdpMutation, UdpRelayProxy } from './conform-proxy.js';

const API_KEY = 'conform-test-key-0123456789abcdef';
const IDLE_MS = 5000;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-conform-ur-'));

async function relayWith(extra: Parameters<typeof startUnityRelay>[0] = {}): Promise<UnityRelayInstance> {
  return startUnityRelay({
    host: '127.0.0.1',
    port: 0,
    apiPort: 0,
    dtlsPort: 0,
    wsPort: 0,
    wssPort: 0,
    dataDir,
    apiKey: API_KEY,
    idleTimeoutMs: IDLE_MS,
    log: silentLogger(),
    ...extra,
  });
}

function portOf(relay: UnityRelayInstance, transport: ConnectionType): number {
  return relay.serverEndpoints.find((e) => e.connectionType === transport)!.port;
}

async function conform(
  relay: UnityRelayInstance,
  port: number,
  transport: ConnectionType,
  idleMs = IDLE_MS,
): Promise<CheckResult[]> {
  const ctx = await unityRelayConform.prepare(
    { host: '127.0.0.1', port },
    { transport, api: relay.apiUrl, apiKey: API_KEY, idleTimeoutMs: String(idleMs), insecure: true },
  );
  return runChecks(unityRelayConform, ctx);
}

const failed = (rs: CheckResult[]) => rs.filter((r) => r.status === 'fail').map((r) => r.id);
const detail = (rs: CheckResult[]) =>
  JSON.stringify(rs.filter((r) => r.status === 'fail').map((r) => [r.id, r.message]));

describe('against gamewire unity-relay', () => {
  let relay: UnityRelayInstance;
  beforeAll(async () => {
    relay = await relayWith();
  });
  afterAll(async () => {
    await relay.close();
  });

  // One transport after the other: each run is what one client address does (ERROR replies and
  // HMAC checks are rate-limited per address, as they should be).
  test.each(['udp', 'dtls', 'ws', 'wss'] as ConnectionType[])(
    '%s: every check passes',
    async (transport) => {
      const results = await conform(relay, portOf(relay, transport), transport);
      expect(failed(results), detail(results)).toEqual([]);
      const skipped = results.filter((r) => r.status === 'skip').map((r) => r.id);
      expect(skipped).toEqual(
        transport === 'dtls'
          ? ['transport.websocket']
          : transport === 'udp'
            ? ['transport.dtls', 'transport.websocket']
            : ['transport.dtls'],
      );
    },
    60_000,
  );
});

describe('against a relay that breaks one rule', () => {
  let relay: UnityRelayInstance;
  beforeAll(async () => {
    // Many conform runs at once from one address: raise the per-address budgets that would
    // otherwise (rightly) throttle them.
    relay = await relayWith({
      errorRatePerSecond: 10_000,
      errorBurst: 10_000,
      hmacRatePerSecond: 10_000,
      hmacBurst: 10_000,
    });
  });
  afterAll(async () => {
    await relay.close();
  });

  const type = (d: Buffer): number => (d.length >= 4 && d[0] === 0xda && d[1] === 0x72 ? d[3]! : -1);
  const lastBind = new Map<string, { bytes: Buffer; at: number }>();

  const cases: { rule: string; check: string; message: RegExp; mutation: () => UdpMutation }[] = [
    {
      rule: 'BIND_RECEIVED with a stray byte',
      check: 'bind.ok',
      message: /no BIND_RECEIVED for a valid BIND/,
      mutation: () => ({ down: (d) => (type(d) === 1 ? Buffer.concat([d, Buffer.from([0])]) : d) }),
    },
    {
      rule: 'the BIND HMAC not checked',
      check: 'bind.bad-hmac',
      message: /wrong HMAC was answered BIND_RECEIVED/,
      mutation: () => ({
        up: (d) => {
          if (type(d) !== 0 || d.length !== 295) return d;
          const a = relay.store.find(d, 12);
          if (a === undefined) return d;
          const fixed = Buffer.from(d);
          bindHmac(a.key, fixed.subarray(0, 263)).copy(fixed, 263);
          return fixed;
        },
      }),
    },
    {
      rule: 'a repeated BIND from the bound address refused',
      check: 'bind.rebind',
      message: /same BIND sent again from the bound address got no BIND_RECEIVED/,
      mutation: () => ({
        up: (d, from) => {
          if (type(d) !== 0) return d;
          const k = `${from.port}`;
          const prev = lastBind.get(k);
          lastBind.set(k, { bytes: d, at: Date.now() });
          return prev?.bytes.equals(d) && Date.now() - prev.at < 3000 ? null : d;
        },
      }),
    },
    {
      rule: 'PING not answered',
      check: 'ping.echo',
      message: /no answer to the PING/,
      mutation: () => ({ down: (d) => (type(d) === 2 ? null : d) }),
    },
    {
      rule: 'ACCEPTED with From and To swapped',
      check: 'connect.accepted',
      message: /does not name the host as From/,
      mutation: () => ({
        down: (d) =>
          type(d) === 6 ? Buffer.concat([d.subarray(0, 4), d.subarray(20, 36), d.subarray(4, 20)]) : d,
      }),
    },
    {
      rule: "a client beyond the host's maxConnections accepted",
      check: 'connect.full',
      message: /second client was ACCEPTED/,
      mutation: () => ({
        down: (d) => {
          if (type(d) !== 8) return d;
          const out = Buffer.from(d);
          out[3] = 6;
          return out;
        },
      }),
    },
    {
      rule: 'RELAY content changed on the way',
      check: 'relay.both-ways',
      message: /reached the (host|client) changed/,
      mutation: () => ({
        down: (d) => {
          if (type(d) !== 10) return d;
          const out = Buffer.from(d);
          out[out.length - 1]! ^= 0xff;
          return out;
        },
      }),
    },
    {
      rule: 'RELAY forwarded whatever its length field says',
      check: 'relay.length',
      message: /length field says \d+ for 8 bytes was forwarded/,
      mutation: () => ({
        up: (d, _from, proxy) => {
          if (type(d) === 10 && d.length >= 38 && d.readUInt16BE(36) !== d.length - 38) {
            const to = proxy.boundFrom.get(d.subarray(20, 36).toString('hex'));
            if (to !== undefined) proxy.sendToClient(d, to);
          }
          return d;
        },
      }),
    },
    {
      rule: 'DISCONNECT not forwarded',
      check: 'disconnect.forwarded',
      message: /no DISCONNECT at the host/,
      mutation: () => ({ down: (d) => (type(d) === 9 ? null : d) }),
    },
    {
      rule: 'CLOSE ignored',
      check: 'close.unbinds',
      message: /after CLOSE a PING was still echoed/,
      mutation: () => ({ up: (d) => (type(d) === 11 ? null : d) }),
    },
    {
      rule: 'ERROR 5 instead of 3 for a new address',
      check: 'error.roaming',
      message: /was not ERROR 3/,
      mutation: () => ({
        down: (d) => {
          if (type(d) !== 12 || d[20] !== 3) return d;
          const out = Buffer.from(d);
          out[20] = 5;
          return out;
        },
      }),
    },
  ];

  test('the proxy alone changes nothing', async () => {
    const proxy = await UdpRelayProxy.start(relay.udpPort);
    try {
      const results = await conform(relay, proxy.port, 'udp');
      expect(failed(results), detail(results)).toEqual([]);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  test.concurrent.each(cases)(
    '$rule: only $check fails',
    async ({ check, message, mutation }) => {
      const proxy = await UdpRelayProxy.start(relay.udpPort, mutation());
      try {
        const results = await conform(relay, proxy.port, 'udp');
        expect(failed(results), detail(results)).toEqual([check]);
        const f = results.find((r) => r.id === check)!;
        expect(f.message).toMatch(message);
        expect(f.evidence?.sent ?? f.evidence?.received).toBeDefined();
        expect(f.clientReaction).toBeTruthy();
      } finally {
        await proxy.close();
      }
    },
    90_000,
  );

  test.concurrent('an idle timeout shorter than the keep-alive: only idle.keep-alive-window fails', async () => {
    const short = await relayWith({ idleTimeoutMs: 2500 });
    try {
      const results = await conform(short, short.udpPort, 'udp', 2500);
      expect(failed(results), detail(results)).toEqual(['idle.keep-alive-window']);
      expect(results.find((r) => r.id === 'idle.keep-alive-window')!.message).toMatch(
        /after 4 s of silence|answered ERROR/,
      );
    } finally {
      await short.close();
    }
  }, 90_000);

  test.concurrent('allocations that never expire: only idle.expired fails', async () => {
    const long = await relayWith({ idleTimeoutMs: 60_000 });
    try {
      const results = await conform(long, long.udpPort, 'udp', 3000);
      expect(failed(results), detail(results)).toEqual(['idle.expired']);
      expect(results.find((r) => r.id === 'idle.expired')!.message).toMatch(
        /still there after 4.5 s of silence/,
      );
    } finally {
      await long.close();
    }
  }, 90_000);

  test.concurrent('a subprotocol in the 101 reply: only transport.websocket fails', async () => {
    const proxy = await TcpHeadProxy.start(portOf(relay, 'ws'), (head) =>
      head.replace('\r\n\r\n', '\r\nSec-WebSocket-Protocol: chat\r\n\r\n'),
    );
    try {
      const results = await conform(relay, proxy.port, 'ws');
      expect(failed(results), detail(results)).toEqual(['transport.websocket']);
      const f = results.find((r) => r.id === 'transport.websocket')!;
      expect(f.message).toMatch(/Sec-WebSocket-Protocol "chat" is present/);
      expect(f.evidence?.received?.toString()).toMatch(/^HTTP\/1.1 101/);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  test.concurrent('a DTLS server that does not take the raw allocation id as identity: only transport.dtls fails', async () => {
    const fake = new DtlsServer({
      pskFor: (identity) => (identity.length === 36 ? Buffer.alloc(64) : undefined),
    });
    const { port } = await fake.listen(0, '127.0.0.1');
    try {
      const results = await conform(relay, port, 'dtls');
      expect(failed(results), detail(results)).toEqual(['transport.dtls']);
      expect(results.find((r) => r.id === 'transport.dtls')!.message).toMatch(/DTLS handshake .* failed/);
    } finally {
      await fake.close();
    }
  }, 60_000);
});
