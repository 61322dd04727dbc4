// Run by server.test.ts inside a network namespace whose loopback holds the addresses it sends
// from: a DTLS server on [::] with a per-address handshake cap, and from each address in turn a
// handshake left half-open (ClientHello, the cookie, ClientHello with it). Prints which got the
// ServerHello flight, the per-address refusals and the handshakes in progress, as one JSON line.
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { clientHelloBody, handshakeMessage } from '../../../dist/src/transports/dtls/handshake.js';
import { DtlsServer } from '../../../dist/src/transports/dtls/index.js';
import { plainRecord } from '../../../dist/src/transports/dtls/record.js';

const { sources, maxHandshakesPerIp } = JSON.parse(process.argv[2]);
const psk = randomBytes(64);
const server = new DtlsServer({
  pskFor: () => psk,
  maxHandshakes: 64,
  maxHandshakesPerIp,
  handshakeTimeoutMs: 60_000,
});
const drops = [];
const dropWaiters = [];
server.on('drop', (reason) => {
  drops.push(reason);
  for (const w of dropWaiters.splice(0)) w(reason);
});
const { port } = await server.listen(0, '::');

function clientHello(cookie, random, messageSeq, recordSeq) {
  const body = clientHelloBody(random, cookie, [0x00a8, 0xc0a4], true);
  return plainRecord(
    22,
    cookie.length ? 0xfefd : 0xfeff,
    0,
    recordSeq,
    handshakeMessage(1, messageSeq, body),
  );
}

/** The next datagram on `socket` (or null after 10 s, which the test reports as a failure). */
function nextReply(socket) {
  return new Promise((resolve) => {
    const deadline = setTimeout(() => resolve(null), 10_000).unref();
    socket.once('message', (m) => {
      clearTimeout(deadline);
      resolve(m);
    });
  });
}

const answered = {};
const sockets = [];
for (const source of sources) {
  const s = dgram.createSocket('udp6');
  sockets.push(s);
  await new Promise((r) => s.bind(0, source, r));
  const random = randomBytes(32);
  const hvrReply = nextReply(s);
  s.send(clientHello(Buffer.alloc(0), random, 0, 0), port, '::1');
  const hvr = await hvrReply;
  if (hvr === null) throw new Error(`no HelloVerifyRequest for ${source}`);
  // record header 13 + handshake header 12 + server_version 2, then the cookie vector.
  const cookie = hvr.subarray(28, 28 + hvr[27]);
  // The ServerHello flight, or the server's refusal: whichever comes first.
  const outcome = Promise.race([
    nextReply(s).then((m) => (m === null ? null : true)),
    new Promise((resolve) => dropWaiters.push((reason) => resolve(reason))),
  ]);
  s.send(clientHello(cookie, random, 1, 1), port, '::1');
  answered[source] = await outcome;
  dropWaiters.length = 0;
}
const out = {
  answered,
  perIpDrops: drops.filter((d) => d === 'handshake-limit-per-ip').length,
  inProgress: server.stats().handshakesInProgress,
};
for (const s of sockets) s.close();
await server.close();
process.stdout.write(`${JSON.stringify(out)}\n`);
