/**
 * `gamewire conform unity-relay`: every check passes against gamewire's relay over every
 * transport, and each rule broken on purpose (a proxy in front of the real relay that rewrites
 * one thing, the real relay with one timeout set wrong, or a small fake DTLS server) makes
 * exactly the check for that rule fail, with evidence that points at it.
 *
 * A conform run is mostly waiting (the idle timeout, windows in which nothing may come back) and
 * vitest runs at most 5 tests at a time: so every run starts when the file does (at most 5 in
 * their busy part at once, see `busy`), each against a relay, proxy or server of its own, and
 * each test awaits its own run and checks its results.
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
import { failed, Runs } from '../../helpers/conform-runs.js';
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

/** Up to `n` holders at once; `take` waits for a free slot and gives its release (idempotent). */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(n: number) {
    this.free = n;
  }

  async take(): Promise<() => void> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next === undefined) this.free++;
      else next();
    };
  }
}

/**
 * A conform run's busy part is its first: allocations, handshakes and BINDs for every check but
 * the idle ones. Then only those are left, which wait out the relay's timers. At most 5 runs are
 * in their busy part at once, as when 5 tests ran at a time: the checks and the relays share this
 * process's event loop, and the idle checks measure the relay's timers through it (all 20 at once
 * lagged it by seconds under stress-ng, and the idle checks then failed).
 */
const busy = new Slots(5);
const IDLE_CHECKS = ['idle.keep-alive-window', 'idle.expired'];

async function conform(
  relay: UnityRelayInstance,
  port: number,
  transport: ConnectionType,
  idleMs = IDLE_MS,
): Promise<CheckResult[]> {
  const release = await busy.take();
  try {
    const ctx = await unityRelayConform.prepare(
      { host: '127.0.0.1', port },
      { transport, api: relay.apiUrl, apiKey: API_KEY, idleTimeoutMs: String(idleMs), insecure: true },
    );
    let left = unityRelayConform.checks.filter((c) => !IDLE_CHECKS.includes(c.id)).length;
    return await runChecks(unityRelayConform, ctx, {
      onResult: (r) => {
        if (!IDLE_CHECKS.includes(r.id) && --left === 0) release();
      },
    });
  } finally {
    release();
  }
}

const detail = (rs: CheckResult[]) =>
  JSON.stringify(rs.filter((r) => r.status === 'fail').map((r) => [r.id, r.message]));

const type = (d: Buffer): number => (d.length >= 4 && d[0] === 0xda && d[1] === 0x72 ? d[3]! : -1);

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
        // An expired allocation's tombstone keeps no key: the relay derives it again.
        const key = a.state === 'expired' ? relay.store.credentials.keyFor(a.id) : a.key;
        const fixed = Buffer.from(d);
        bindHmac(key, fixed.subarray(0, 263)).copy(fixed, 263);
        return fixed;
      },
    }),
  },
  {
    rule: 'a repeated BIND from the bound address refused',
    check: 'bind.rebind',
    message: /same BIND sent again from the bound address got no BIND_RECEIVED/,
    mutation: () => {
      const lastBind = new Map<string, { bytes: Buffer; at: number }>();
      return {
        up: (d, from) => {
          if (type(d) !== 0) return d;
          const k = `${from.port}`;
          const prev = lastBind.get(k);
          lastBind.set(k, { bytes: d, at: Date.now() });
          return prev?.bytes.equals(d) && Date.now() - prev.at < 3000 ? null : d;
        },
      };
    },
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

const transports: ConnectionType[] = ['udp', 'dtls', 'ws', 'wss'];

/** The relay behind the proxies: many conform runs at once from one address. */
let relay: UnityRelayInstance;
const runs = new Runs<string>();

beforeAll(async () => {
  // Started first and alone: it writes the self-signed wss certificate the other relays then read.
  // The runs that break a rule all go through it at once from one address: raise the per-address
  // budgets that would otherwise (rightly) throttle them.
  relay = await relayWith({
    errorRatePerSecond: 10_000,
    errorBurst: 10_000,
    hmacRatePerSecond: 10_000,
    hmacBurst: 10_000,
  });
  // Every run starts now. A run against gamewire is what one client address does, and ERROR
  // replies and HMAC checks are rightly rate-limited per address: each transport gets a relay of
  // its own, with the default budgets.
  for (const transport of transports)
    runs.start(transport, async () => {
      const own = await relayWith();
      try {
        return await conform(own, portOf(own, transport), transport);
      } finally {
        await own.close();
      }
    });
  // A run that breaks a rule goes through a proxy (or against a relay or server) of its own.
  runs.start('no mutation', () => throughProxy({}));
  for (const c of cases) runs.start(c.rule, () => throughProxy(c.mutation()));
  runs.start('idle timeout 2500', async () => {
    const short = await relayWith({ idleTimeoutMs: 2500 });
    try {
      return await conform(short, short.udpPort, 'udp', 2500);
    } finally {
      await short.close();
    }
  });
  runs.start('never expire', async () => {
    const long = await relayWith({ idleTimeoutMs: 60_000 });
    try {
      return await conform(long, long.udpPort, 'udp', 3000);
    } finally {
      await long.close();
    }
  });
  runs.start('subprotocol', async () => {
    const proxy = await TcpHeadProxy.start(portOf(relay, 'ws'), (head) =>
      head.replace('\r\n\r\n', '\r\nSec-WebSocket-Protocol: chat\r\n\r\n'),
    );
    try {
      return await conform(relay, proxy.port, 'ws');
    } finally {
      await proxy.close();
    }
  });
  runs.start('fake dtls', async () => {
    const fake = new DtlsServer({
      pskFor: (identity) => (identity.length === 36 ? Buffer.alloc(64) : undefined),
    });
    const { port } = await fake.listen(0, '127.0.0.1');
    try {
      return await conform(relay, port, 'dtls');
    } finally {
      await fake.close();
    }
  });
});

afterAll(async () => {
  await runs.settled();
  await relay?.close();
});

/** A udp conform run through a proxy of its own in front of the relay. */
async function throughProxy(mutation: UdpMutation): Promise<CheckResult[]> {
  const proxy = await UdpRelayProxy.start(relay.udpPort, mutation);
  try {
    return await conform(relay, proxy.port, 'udp');
  } finally {
    await proxy.close();
  }
}

describe('against gamewire unity-relay', () => {
  test.each(transports)(
    '%s: every check passes',
    async (transport) => {
      const results = await runs.get(transport);
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
  test('the proxy alone changes nothing', async () => {
    const results = await runs.get('no mutation');
    expect(failed(results), detail(results)).toEqual([]);
  }, 60_000);

  test.each(cases)(
    '$rule: only $check fails',
    async ({ rule, check, message }) => {
      const results = await runs.get(rule);
      expect(failed(results), detail(results)).toEqual([check]);
      const f = results.find((r) => r.id === check)!;
      expect(f.message).toMatch(message);
      expect(f.evidence?.sent ?? f.evidence?.received).toBeDefined();
      expect(f.clientReaction).toBeTruthy();
    },
    90_000,
  );

  test('an idle timeout shorter than the keep-alive: only idle.keep-alive-window fails', async () => {
    const results = await runs.get('idle timeout 2500');
    expect(failed(results), detail(results)).toEqual(['idle.keep-alive-window']);
    expect(results.find((r) => r.id === 'idle.keep-alive-window')!.message).toMatch(
      /after 4 s of silence|answered ERROR/,
    );
  }, 90_000);

  test('allocations that never expire: only idle.expired fails', async () => {
    const results = await runs.get('never expire');
    expect(failed(results), detail(results)).toEqual(['idle.expired']);
    expect(results.find((r) => r.id === 'idle.expired')!.message).toMatch(
      /still there after 4.5 s of silence/,
    );
  }, 90_000);

  test('a subprotocol in the 101 reply: only transport.websocket fails', async () => {
    const results = await runs.get('subprotocol');
    expect(failed(results), detail(results)).toEqual(['transport.websocket']);
    const f = results.find((r) => r.id === 'transport.websocket')!;
    expect(f.message).toMatch(/Sec-WebSocket-Protocol "chat" is present/);
    expect(f.evidence?.received?.toString()).toMatch(/^HTTP\/1.1 101/);
  }, 60_000);

  test('a DTLS server that does not take the raw allocation id as identity: only transport.dtls fails', async () => {
    const results = await runs.get('fake dtls');
    expect(failed(results), detail(results)).toEqual(['transport.dtls']);
    expect(results.find((r) => r.id === 'transport.dtls')!.message).toMatch(/DTLS handshake .* failed/);
  }, 60_000);
});
