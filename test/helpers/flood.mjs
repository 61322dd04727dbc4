/**
 * The attackers of the crowd tests, in a process of their own so that their sending loop never
 * delays the legitimate players' timers in the test process. Given one JSON argument, it binds a
 * socket to every attacker address (the whole 127/8 is local on Linux), runs for `durationMs`
 * and prints one JSON line of what it did, per address where the tests need it.
 *
 * {
 *   host, udpPort?, tcpPort?, httpPort?,
 *   addresses: string[],
 *   durationMs, intervalMs,
 *   udpFlood?: hex[],                     // every round, from each address's long-lived socket,
 *                                         // spread over the round (a steady flood, not one burst)
 *   udpSessions?: { rounds, packets: hex[], gapMs, patch?: { packet, offset, base, modulo } },
 *                                         // `rounds` times, beside the flood: a fresh socket per address
 *                                         // sends `packets` in order (a new source port: a new session)
 *   tcpHold?: hex,                        // one connection per address that sends these bytes and holds
 *                                         // (it never reads: what the server sends waits in the kernel)
 *   tcpHolds?: [{ hex, perAddress?, addresses? }], // more of those: `perAddress` connections each
 *                                         // from the first `addresses` addresses (default all)
 *   tcpChurn?: hex,                       // every round, per address: connect, send, close
 *   http?: { method, path, body, perRound, headers?, overlap? }, // requests per address per round (new
 *                                         // connection each); with `overlap` a round does not wait for them
 *   dtlsHalfOpen?: { port, perAddress, rounds, gapMs? }, // `rounds` times, beside the flood: from a fresh
 *                                         // socket, `perAddress` per address, a DTLS 1.2 ClientHello, then
 *                                         // the same hello with the server's cookie (a handshake the server
 *                                         // must keep), and never the next flight: half-open handshakes
 * }
 *
 * Replies are counted per address, for the "never more than 3x to an unproven source" checks.
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import http from 'node:http';
import net from 'node:net';

const config = JSON.parse(process.argv[2]);
const host = config.host ?? '127.0.0.1';
const stats = new Map();
const tally = (address) => {
  let t = stats.get(address);
  if (t === undefined) {
    t = { out: 0, in: 0, http: {} };
    stats.set(address, t);
  }
  return t;
};
const totals = {
  udpSent: 0,
  udpReceived: 0,
  tcpConnected: 0,
  tcpRefused: 0,
  tcpClosedEarly: 0,
  http: {},
  dtlsCookies: 0,
  dtlsServerHellos: 0,
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const hex = (h) => Buffer.from(h, 'hex');

async function udpSocket(address) {
  const s = dgram.createSocket('udp4');
  s.on('error', () => {});
  s.on('message', (m) => {
    tally(address).in += m.length;
    totals.udpReceived += m.length;
  });
  await new Promise((r) => s.bind(0, address, () => r()));
  return s;
}

function udpSend(s, address, b) {
  tally(address).out += b.length;
  totals.udpSent += b.length;
  s.send(b, config.udpPort, host);
}

const flood = (config.udpFlood ?? []).map(hex);
const sockets = [];
if (config.udpPort !== undefined && flood.length > 0)
  for (const a of config.addresses) sockets.push([a, await udpSocket(a)]);

const stopAt = performance.now() + config.durationMs;
const held = [];
const holds = [
  ...(config.tcpHold === undefined ? [] : [{ hex: config.tcpHold }]),
  ...(config.tcpHolds ?? []),
];
for (const hold of holds) {
  const bytes = hex(hold.hex);
  const targets = config.addresses.slice(0, hold.addresses ?? config.addresses.length);
  for (const a of targets.flatMap((x) => Array.from({ length: hold.perAddress ?? 1 }, () => x))) {
    const t = net.connect({ host, port: config.tcpPort, localAddress: a });
    t.on('error', () => {});
    let connected = false;
    t.on('connect', () => {
      connected = true;
      totals.tcpConnected++;
      t.write(bytes);
    });
    t.on('close', () => {
      if (!connected) totals.tcpRefused++;
      else if (performance.now() < stopAt) totals.tcpClosedEarly++;
    });
    held.push(t);
    if (held.length % 100 === 0) await sleep(5); // pacing: connections opened in steps, not all in one tick
  }
}

/** Runs `each` over `items` in slices of 50, spread over about `spanMs` (a steady flood, not bursts). */
async function spread(items, spanMs, each) {
  const slices = Math.ceil(items.length / 50);
  for (let k = 0; k < slices; k++) {
    for (const item of items.slice(k * 50, (k + 1) * 50)) each(item);
    await sleep(spanMs / slices); // pacing: the items are spread over spanMs (the point of the helper)
  }
}

async function sessionRound(round) {
  const u = config.udpSessions;
  const fresh = [];
  for (const [i, a] of config.addresses.entries()) fresh.push([i, a, await udpSocket(a)]);
  for (let p = 0; p < u.packets.length; p++) {
    await spread(fresh, u.gapMs ?? 20, ([i, a, s]) => {
      let b = hex(u.packets[p]);
      if (u.patch !== undefined && u.patch.packet === p) {
        b = Buffer.from(b);
        b[u.patch.offset] = u.patch.base + ((i + round) % u.patch.modulo);
      }
      udpSend(s, a, b);
    });
  }
  return fresh.map(([, , s]) => s);
}

function httpRequest(address) {
  const h = config.http;
  return new Promise((resolve) => {
    const req = http.request(
      {
        host,
        port: config.httpPort,
        localAddress: address,
        method: h.method,
        path: h.path,
        agent: false,
        headers: { 'content-type': 'application/json', ...h.headers },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      },
    );
    req.on('error', () => resolve(0));
    req.setTimeout(5000, () => req.destroy());
    req.end(h.body === undefined ? undefined : JSON.stringify(h.body));
  }).then((code) => {
    totals.http[code] = (totals.http[code] ?? 0) + 1;
  });
}

/**
 * One round of half-open DTLS handshakes: hello, cookie, hello with the cookie; the ServerHello
 * flight that follows is counted and never answered. The hello is built with gamewire's own DTLS
 * encoders (compiled, in dist/), offering the PSK suites Unity offers.
 */
async function dtlsRound(dtls) {
  const { clientHelloBody, handshakeMessage } = await import('../../dist/src/transports/dtls/handshake.js');
  const { plainRecord } = await import('../../dist/src/transports/dtls/record.js');
  const hello = (cookie, random, seq) =>
    plainRecord(
      22,
      cookie.length > 0 ? 0xfefd : 0xfeff,
      0,
      seq,
      handshakeMessage(1, seq, clientHelloBody(random, cookie, [0x00a8, 0xc0a4], true)),
    );
  const opened = [];
  // A round is spread over `gapMs`, 50 addresses at a time.
  const pause = (dtls.gapMs ?? 0) / Math.ceil(config.addresses.length / 50);
  for (const [i, a] of config.addresses.entries()) {
    for (let k = 0; k < dtls.perAddress; k++) {
      const s = await udpSocket(a);
      const random = randomBytes(32);
      s.on('message', (m) => {
        if (m[0] === 22 && m[13] === 3) {
          // HelloVerifyRequest: record 13 + handshake 12 + version 2, then the cookie vector.
          totals.dtlsCookies++;
          const cookie = m.subarray(28, 28 + m[27]);
          const b = hello(cookie, random, 1);
          tally(a).out += b.length;
          totals.udpSent += b.length;
          s.send(b, dtls.port, host);
        } else if (m[0] === 22 && m[13] === 2) totals.dtlsServerHellos++;
      });
      const b = hello(Buffer.alloc(0), random, 0);
      tally(a).out += b.length;
      totals.udpSent += b.length;
      s.send(b, dtls.port, host);
      opened.push(s);
    }
    if (i % 50 === 49) await sleep(pause); // pacing: sessions opened in steps
  }
  return opened;
}

const sessionSockets = [];
const dtlsRounds = (async () => {
  const d = config.dtlsHalfOpen;
  for (let r = 0; r < (d?.rounds ?? 0); r++) sessionSockets.push(...(await dtlsRound(d)));
})();
// Blind sessions run beside the flood rounds, one batch after the other (all of them, even if
// that takes longer than the flood).
const sessions = (async () => {
  for (let r = 0; r < (config.udpSessions?.rounds ?? 0); r++) sessionSockets.push(...(await sessionRound(r)));
})();
let rounds = 0;
const httpPending = [];
while (performance.now() < stopAt) {
  const started = performance.now();
  await spread(sockets, config.intervalMs * 0.8, ([a, s]) => {
    for (const b of flood) udpSend(s, a, b);
  });
  if (config.tcpChurn !== undefined) {
    const bytes = hex(config.tcpChurn);
    for (const a of config.addresses) {
      const t = net.connect({ host, port: config.tcpPort, localAddress: a });
      t.on('error', () => {});
      t.on('connect', () => t.end(bytes));
    }
  }
  if (config.http !== undefined) {
    const pending = [];
    for (const a of config.addresses)
      for (let i = 0; i < (config.http.perRound ?? 1); i++) pending.push(httpRequest(a));
    // `overlap`: a slow server does not slow the other floods down (awaited at the end).
    if (config.http.overlap === true) httpPending.push(...pending);
    else await Promise.all(pending);
  }
  rounds++;
  await sleep(Math.max(1, config.intervalMs - (performance.now() - started))); // the flood's rate: one round per interval
}
await sessions;
await dtlsRounds;
await Promise.all(httpPending);
// Late replies still count against the 3x bound.
await sleep(300);
for (const t of held) t.destroy();
await Promise.all(
  [...sockets.map(([, s]) => s), ...sessionSockets].map((s) => new Promise((r) => s.close(() => r()))),
);
let over = 0;
let worst = 0;
const perAddress = {};
for (const [a, t] of stats) {
  if (t.in > 3 * t.out) over++;
  if (t.out > 0) worst = Math.max(worst, t.in / t.out);
  if (config.perAddress) perAddress[a] = [t.out, t.in];
}
process.stdout.write(
  `${JSON.stringify({ rounds, ...totals, addressesOver3x: over, worstRatio: worst, perAddress })}\n`,
);
