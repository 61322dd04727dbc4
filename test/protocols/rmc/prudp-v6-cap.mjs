// Run by prudp-seam.test.ts inside a network namespace whose loopback holds the addresses it
// sends from: a PRUDP server on [::] with a per-address cap, and one SYN from each address in
// turn. Prints which got a SYN-ACK, the drops and the per-address counts, as one JSON line.
import dgram from 'node:dgram';
import { silentLogger } from '../../../dist/src/core/logger.js';
import { ProtocolMetrics } from '../../../dist/src/core/metrics.js';
import {
  accessKeyByte,
  Flag,
  PacketType,
  PrudpServer,
  RmcServer,
  writePacket,
} from '../../../dist/src/protocols/rmc/index.js';
import { WireWriter } from '../../../dist/src/wire/index.js';

const { sources, maxConnectionsPerIp } = JSON.parse(process.argv[2]);
const KEY = 'yl4NG7qZ';
const log = silentLogger();
const metrics = new ProtocolMetrics('rmc');
const rmc = new RmcServer({ log, metrics });
const server = new PrudpServer({
  accessKey: KEY,
  dispatcher: rmc.dispatcher,
  log,
  metrics,
  maxConnectionsPerIp,
});
const { port } = await server.listen({ host: '::', port: 0 });

function syn() {
  const w = new WireWriter();
  writePacket(
    w,
    {
      source: 0x3f,
      destination: 0x31,
      type: PacketType.SYN,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
      connectionSignature: 0,
    },
    undefined,
    { width: 1, keyByte: accessKeyByte(KEY) },
  );
  return w.toBuffer();
}

const dropsNow = () => metrics.dropped.get('prudp_per_ip_limit') ?? 0;
const answered = {};
const sockets = [];
for (const source of sources) {
  const s = dgram.createSocket('udp6');
  sockets.push(s);
  await new Promise((r) => s.bind(0, source, r));
  const before = dropsNow();
  // Either the SYN-ACK arrives or the server counts the refusal: whichever comes first.
  answered[source] = await new Promise((resolve) => {
    const poll = setInterval(() => {
      if (dropsNow() > before) done(false);
    }, 5);
    const deadline = setTimeout(() => done(null), 10_000);
    function done(v) {
      clearInterval(poll);
      clearTimeout(deadline);
      s.removeAllListeners('message');
      resolve(v);
    }
    s.on('message', () => done(true));
    s.send(syn(), port, '::1');
  });
}
const out = {
  answered,
  perIpDrops: dropsNow(),
  perAddress: Object.fromEntries(server.table?.perAddressCounts ?? []),
};
for (const s of sockets) s.close();
await server.close();
process.stdout.write(`${JSON.stringify(out)}\n`);
