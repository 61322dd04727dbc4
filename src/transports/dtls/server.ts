import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type dgram from 'node:dgram';
import { EventEmitter } from 'node:events';
import { addressKey } from '../../core/connection.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import type { DtlsAssociation, DtlsServerEventMap, DtlsServerOptions, DtlsServerStats } from './api.js';
import {
  type DatagramContext,
  type Peer,
  type PendingHandshake,
  type Send,
  ServerAssociation,
  safeSend,
} from './association.js';
import {
  AlertDescription,
  AlertLevel,
  ContentType,
  DTLS_1_0,
  DTLS_1_2,
  HandshakeType,
  MAX_SEQUENCE,
  RANDOM_LENGTH,
} from './constants.js';
import { CookieJar } from './cookie.js';
import { DtlsError } from './errors.js';
import {
  type ClientHello,
  chooseSuite,
  HandshakeView,
  handshakeMessage,
  helloVerifyRequestBody,
  parseClientHello,
  parseClientKeyExchange,
  Reassembler,
  readHandshake,
  serverHelloBody,
} from './handshake.js';
import type { DtlsRecordOffload } from './offload.js';
import { masterSecret, pskPremasterSecret, trafficKeys, verifyData } from './prf.js';
import { plainRecord, RecordView, ReplayWindow, readRecord } from './record.js';
import { CIPHER_SUITES, DEFAULT_CIPHER_SUITES } from './suites.js';

const EMPTY = Buffer.alloc(0);

/** Defaults of every limit (docs/dtls.md lists them). */
export const DTLS_SERVER_DEFAULTS = {
  maxHandshakes: 1024,
  maxHandshakesPerIp: 64,
  handshakeTimeoutMs: 61_000,
  probeQuietMs: 5000,
  cookieSecretRotationMs: 60_000,
  maxRecordPlaintext: 1536,
  maxAssociations: 65_536,
  associationIdleTimeoutMs: 120_000,
  maxHandshakeMessageBytes: 4096,
  recvBufferBytes: 4 * 1024 * 1024,
} as const;

/**
 * A DTLS 1.2 PSK server (docs/dtls.md): stateless cookies, AEAD suites only, one application
 * record per datagram, and the reconnection-probe rule Unity's client depends on. It either owns
 * a UDP socket (`listen`) or is fed datagrams by whoever owns one (`handleDatagram`).
 */
export class DtlsServer extends EventEmitter<DtlsServerEventMap> {
  readonly #options: Required<DtlsServerOptions>;
  readonly #preference: number[];
  readonly #cookies: CookieJar;
  readonly #peers = new Map<string, Map<number, Peer>>();
  /** Handshakes in progress per address key (IPv4, or an IPv6 /64), for `maxHandshakesPerIp`. */
  readonly #handshakesPerIp = new Map<string, number>();
  /** Peers with a handshake in progress, oldest first (the first to go when the table is full). */
  readonly #pendingHandshakes = new Set<Peer>();
  #handshakes = 0;
  #associations = 0;
  #handshakesCompleted = 0;
  readonly #drops = new Map<string, number>();
  #socket: dgram.Socket | undefined;
  #sweeper: NodeJS.Timeout | undefined;
  #closed = false;
  /** Contexts of the datagrams being handled: more than one only when a listener re-enters. */
  readonly #contexts: DatagramContext[] = [];
  #depth = 0;
  /** Runs the record layer of established associations elsewhere (offload.ts), when set. */
  #offload: DtlsRecordOffload | undefined;

  constructor(options: DtlsServerOptions) {
    super();
    const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
    const o = {
      ...DTLS_SERVER_DEFAULTS,
      cipherSuites: [...DEFAULT_CIPHER_SUITES],
      ...given,
    } as Required<DtlsServerOptions>;
    for (const [key, value] of Object.entries(o)) {
      if (typeof value === 'number' && !(Number.isFinite(value) && value >= 0)) {
        throw new DtlsError('ERR_DTLS_BAD_OPTION', `DtlsServer option ${key} must be a non-negative number`);
      }
    }
    for (const id of o.cipherSuites) {
      if (!CIPHER_SUITES.has(id))
        throw new DtlsError(
          'ERR_DTLS_BAD_OPTION',
          `DtlsServer does not implement cipher suite 0x${id.toString(16)}`,
        );
    }
    if (o.cipherSuites.length === 0)
      throw new DtlsError('ERR_DTLS_BAD_OPTION', 'DtlsServer needs at least one cipher suite');
    this.#options = o;
    this.#preference = [...o.cipherSuites];
    this.#cookies = new CookieJar(o.cookieSecretRotationMs);
  }

  /** Binds a UDP socket of its own and serves it. */
  async listen(port: number, host: string): Promise<{ address: string; port: number }> {
    if (this.#socket !== undefined)
      throw new DtlsError('ERR_DTLS_LISTENING', 'DtlsServer is already listening');
    const socket = await bindUdp({ host, port, recvBufferSize: this.#options.recvBufferBytes });
    this.#socket = socket;
    socket.on('error', () => {
      // Per-datagram send errors (ICMP unreachable etc.) must not stop the server.
    });
    socket.on('message', (msg, rinfo) => this.handleDatagram(msg, rinfo, undefined));
    const bound = socket.address();
    return { address: bound.address, port: bound.port };
  }

  /**
   * Handles one datagram received by someone else's socket. `send` must send a datagram back to
   * `rinfo`'s address and port. Never throws: whatever is wrong with the datagram is a `drop`.
   * `keptBy`: the record offload inspected the datagram for this association, which it holds, and
   * found nothing in it that needs the association's state (offload.ts): it stays with the
   * offload unless handling the datagram needs it here after all.
   */
  handleDatagram(
    msg: Buffer,
    rinfo: { address: string; port: number },
    send: Send | undefined,
    keptBy?: DtlsAssociation,
  ): void {
    if (this.#closed) return;
    let ctx = this.#contexts[this.#depth];
    if (ctx === undefined) {
      ctx = {
        rv: new RecordView(),
        hv: new HandshakeView(),
        address: '',
        port: 0,
        send: undefined,
        length: 0,
        peer: undefined,
        resendServerHello: false,
        resendFinal: 'no',
      };
      this.#contexts.push(ctx);
    }
    this.#depth++;
    ctx.address = rinfo.address;
    ctx.port = rinfo.port;
    ctx.send = send;
    ctx.length = msg.length;
    ctx.peer = this.#peers.get(rinfo.address)?.get(rinfo.port);
    ctx.resendServerHello = false;
    ctx.resendFinal = 'no';
    // A datagram the offload did not inspect for it: the association's state comes back here first.
    const held = ctx.peer?.association;
    if (held?.offloaded && held !== keptBy) this.#reclaim(held);
    try {
      this.#datagram(ctx, msg);
      const peer = ctx.peer;
      if (ctx.resendServerHello && peer?.handshake !== undefined)
        this.#sendServerHelloFlight(peer, peer.handshake);
      let a = peer?.association;
      if (ctx.resendFinal !== 'no' && a?.offloaded) {
        // Resending our Finished needs the write sequence number (and whether the peer has it).
        this.#reclaim(a);
        a = peer?.association;
      }
      if (ctx.resendFinal !== 'no' && a !== undefined && !a.closed && a.finalFlight !== undefined) {
        if (ctx.resendFinal === 'authenticated' || a.finalFlightLength() <= ctx.length) a.sendFinalFlight();
        else this.#drop('amplification', ctx);
      }
    } catch {
      this.#drop('internal-error', ctx);
    } finally {
      this.#depth--;
      ctx.peer = undefined;
      ctx.send = undefined;
    }
    if (this.#offload !== undefined) {
      const a = this.#peers.get(rinfo.address)?.get(rinfo.port)?.association;
      if (a !== undefined) this.#offer(a);
    }
  }

  /**
   * An application record the offload opened (it checked epoch, replay window and tag, and
   * marked the window): what `handleDatagram` does after decrypting one.
   */
  handleOffloadedRecord(association: DtlsAssociation, plaintext: Buffer): void {
    if (this.#closed) return;
    const a = association as ServerAssociation;
    if (a.closed || a.owner !== this) {
      this.#drop('no-association', { address: a.remoteAddress, port: a.remotePort });
      return;
    }
    a.lastReceivedAt = Date.now();
    a.finalFlight = undefined; // the client has our Finished: nothing left to retransmit
    this.#emitSafe('message', a, plaintext);
  }

  /**
   * `count` records from `remote` the offload dropped (`replay`, `bad-record-mac`,
   * `record-too-large`, and junk: `truncated-record`, `bad-epoch`, …): counted and emitted as here.
   */
  handleOffloadedDrop(reason: string, remote: { address: string; port: number }, count = 1): void {
    if (this.#closed) return;
    for (let i = 0; i < count; i++) this.#drop(reason, remote);
  }

  /**
   * Hands the record layer of every established association to `offload` (and of each one
   * established later), or takes them all back (`undefined`: the wire tap, a recording).
   */
  setRecordOffload(offload: DtlsRecordOffload | undefined): void {
    if (offload === this.#offload) return;
    for (const a of this.#established()) this.#reclaim(a);
    this.#offload = offload;
    if (offload !== undefined) for (const a of this.#established()) this.#offer(a);
  }

  /** Sends through the offload; undefined when the association is back here (seal it here). */
  sendOffloaded(a: ServerAssociation, plaintext: Buffer): boolean | undefined {
    const o = this.#offload;
    const result = o === undefined ? 'detached' : o.send(a, ContentType.applicationData, plaintext);
    if (result === 'sent') return true;
    this.#reclaim(a);
    if (a.closed) return false;
    if (result === 'exhausted') {
      this.release(a, 'sequence-exhausted', false);
      return false;
    }
    return undefined;
  }

  #established(): ServerAssociation[] {
    const out: ServerAssociation[] = [];
    for (const byPort of this.#peers.values())
      for (const peer of byPort.values()) if (peer.association !== undefined) out.push(peer.association);
    return out;
  }

  /**
   * Takes an association's record layer back from the offload, with the state it reached (and its
   * keys, which the offload may have kept as their only copy). An offload that lost it lost the
   * keys too: the association ends, without a close_notify (it could not be sealed).
   */
  #reclaim(a: ServerAssociation): void {
    if (!a.offloaded) return;
    a.offloaded = false;
    const back = this.#offload?.detach(a);
    if (back === undefined) {
      this.release(a, 'offload-lost', false);
      return;
    }
    a.writeSeq = Math.max(a.writeSeq, back.writeSeq);
    a.replay.restore(back.replay);
    if (back.idleMs !== undefined) a.lastReceivedAt = Math.max(a.lastReceivedAt, Date.now() - back.idleMs);
    if (back.applicationDataSeen) a.finalFlight = undefined;
  }

  /** Hands an established association to the offload, if there is one and it takes it. */
  #offer(a: ServerAssociation): void {
    const o = this.#offload;
    if (o === undefined || a.offloaded || a.closed || a.peer.association !== a || a.writeSeq > MAX_SEQUENCE)
      return;
    try {
      a.offloaded = o.attach(a, a.recordState());
    } catch {
      a.offloaded = false;
    }
    // A new session from the same address is on its way: its flight must reach this server.
    if (a.offloaded && a.peer.handshake !== undefined) o.handshakePending?.(a, true);
  }

  /** Closes every association (close_notify), abandons handshakes and closes the owned socket. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    for (const byPort of [...this.#peers.values()]) {
      for (const peer of [...byPort.values()]) {
        if (peer.handshake !== undefined) this.#abandonHandshake(peer);
        if (peer.association !== undefined) this.release(peer.association, 'server-close', true);
      }
    }
    if (this.#socket !== undefined) await closeUdp(this.#socket);
    this.#socket = undefined;
  }

  stats(): DtlsServerStats {
    return {
      handshakesInProgress: this.#handshakes,
      associations: this.#associations,
      handshakesCompleted: this.#handshakesCompleted,
      drops: Object.fromEntries(this.#drops),
    };
  }

  /** Forgets an association (called by the association itself, by alerts and by the sweeper). */
  release(a: ServerAssociation, reason: string, notify: boolean): void {
    if (a.closed) return;
    this.#reclaim(a);
    if (a.closed) return; // the offload had lost it (and #reclaim released it)
    if (notify) a.sendCloseNotify();
    a.closed = true;
    const peer = a.peer;
    if (peer.association === a) {
      peer.association = undefined;
      this.#associations--;
      this.#forgetPeerIfEmpty(peer);
    }
    this.#emitSafe('close', a, reason);
  }

  #count(reason: string): void {
    this.#drops.set(reason, (this.#drops.get(reason) ?? 0) + 1);
  }

  #drop(reason: string, ctx: { address: string; port: number }): void {
    this.#count(reason);
    if (this.listenerCount('drop') > 0) {
      try {
        this.emit('drop', reason, { address: ctx.address, port: ctx.port });
      } catch {
        this.#count('listener-error');
      }
    }
  }

  /**
   * Emits an event whose listener may throw: the error is counted (`listener-error`) and the
   * server goes on, since it may run inside a timer (idle sweep) or another peer's datagram.
   */
  #emitSafe<K extends keyof DtlsServerEventMap>(event: K, ...args: DtlsServerEventMap[K]): void {
    try {
      (this.emit as (e: K, ...a: DtlsServerEventMap[K]) => boolean)(event, ...args);
    } catch {
      this.#count('listener-error');
    }
  }

  #datagram(ctx: DatagramContext, msg: Buffer): void {
    const rv = ctx.rv;
    let offset = 0;
    while (offset < msg.length) {
      const fault = readRecord(msg, offset, rv);
      if (fault !== undefined) {
        this.#drop(fault, ctx);
        return;
      }
      offset = rv.end;
      const fragment = msg.subarray(rv.fragmentStart, rv.end);
      if (rv.epoch === 0) this.#plaintextRecord(ctx, rv, fragment);
      else if (rv.epoch === 1) this.#protectedRecord(ctx, rv, fragment);
      else this.#drop('bad-epoch', ctx);
    }
  }

  #plaintextRecord(ctx: DatagramContext, rv: RecordView, fragment: Buffer): void {
    switch (rv.type) {
      case ContentType.handshake:
        this.#plaintextHandshake(ctx, rv, fragment);
        return;
      case ContentType.changeCipherSpec:
        // The Finished that follows is what proves the client; a stray or repeated CCS changes nothing.
        return;
      case ContentType.alert: {
        const peer = ctx.peer;
        if (peer?.handshake !== undefined) {
          // The client gave up on the handshake in progress (an unauthenticated alert cannot end an
          // established association, though: anyone could forge it).
          this.#abandonHandshake(peer);
          this.#drop('peer-alert', ctx);
        } else {
          this.#drop('plaintext-alert', ctx);
        }
        return;
      }
      default:
        this.#drop('unexpected-plaintext-record', ctx);
    }
  }

  #plaintextHandshake(ctx: DatagramContext, rv: RecordView, fragment: Buffer): void {
    const hv = ctx.hv;
    let offset = 0;
    while (offset < fragment.length) {
      try {
        readHandshake(fragment, offset, fragment.length, hv);
      } catch {
        this.#drop('malformed-handshake', ctx);
        return;
      }
      offset = hv.end;
      if (hv.msgType === HandshakeType.clientHello) {
        if (!hv.whole) {
          // Stateless cookies need the whole hello in one datagram; at MTU 1400 it always is.
          this.#drop('fragmented-client-hello', ctx);
          continue;
        }
        this.#clientHello(ctx, rv, hv, fragment.subarray(hv.bodyStart, hv.end));
      } else if (hv.msgType === HandshakeType.clientKeyExchange) {
        this.#clientKeyExchange(ctx, hv, fragment);
      } else {
        this.#drop('unexpected-handshake', ctx);
      }
    }
  }

  #clientHello(ctx: DatagramContext, rv: RecordView, hv: HandshakeView, body: Buffer): void {
    let ch: ClientHello;
    try {
      ch = parseClientHello(body);
    } catch {
      this.#drop('malformed-client-hello', ctx);
      return;
    }
    const now = Date.now();
    const peer = ctx.peer;
    const existing = peer?.association;
    if (existing?.offloaded) {
      // The offload holds it (and this hello did not take it back): its last-received time is there.
      const ms = this.#offload?.idleMs(existing);
      if (ms !== undefined) existing.lastReceivedAt = Math.max(existing.lastReceivedAt, now - ms);
    }
    if (existing !== undefined && now - existing.lastReceivedAt < this.#options.probeQuietMs) {
      // Unity's reconnection probe on a live association: any reply (even an alert) would make
      // the client drop a session that works (unity-relay docs, "reconnection probe").
      this.#drop('probe', ctx);
      return;
    }
    const hs = peer?.handshake;
    if (hs !== undefined && hv.messageSeq === hs.clientHelloSeq && ch.random.equals(hs.clientRandom)) {
      // The same cookie-carrying hello again: our ServerHello flight was lost.
      if (hs.state === 'await-client-key-exchange') ctx.resendServerHello = true;
      return;
    }
    if (
      ch.cookie.length === 0 ||
      !this.#cookies.verify(ch.cookie, ctx.address, ctx.port, ch.beforeCookie, ch.afterCookie, now)
    ) {
      this.#helloVerifyRequest(ctx, rv, hv, ch, now);
      return;
    }
    // From here the source address is proven: replies may be larger than the request.
    if (ch.clientVersion > DTLS_1_2) {
      // Numerically greater = older (DTLS 1.0 is 0xfeff).
      this.#statelessAlert(ctx, rv.seq, AlertDescription.protocolVersion, 'unsupported-version');
      return;
    }
    const suiteId = chooseSuite(this.#preference, ch.cipherSuites);
    if (suiteId === undefined) {
      this.#statelessAlert(ctx, rv.seq, AlertDescription.handshakeFailure, 'no-shared-cipher-suite');
      return;
    }
    if (!ch.offersNullCompression || ch.badRenegotiationInfo) {
      this.#statelessAlert(ctx, rv.seq, AlertDescription.handshakeFailure, 'bad-client-hello');
      return;
    }
    if (hs === undefined) {
      const key = peer?.addressKey ?? addressKey(ctx.address);
      if ((this.#handshakesPerIp.get(key) ?? 0) >= this.#options.maxHandshakesPerIp) {
        this.#drop('handshake-limit-per-ip', ctx);
        return;
      }
      if (this.#handshakes >= this.#options.maxHandshakes) {
        // Full: the oldest handshake makes room (a real client finishes within a round trip, so
        // the oldest is the likeliest to be abandoned). Refusing instead would let 32 addresses
        // lock every newcomer out for a whole handshake timeout (docs/dtls.md).
        const oldest = this.#pendingHandshakes.values().next();
        if (oldest.done === true) {
          this.#drop('handshake-limit', ctx);
          return;
        }
        this.#abandonHandshake(oldest.value);
        this.#drop('handshake-evicted', oldest.value);
      }
    }
    if (existing === undefined && this.#associations >= this.#options.maxAssociations) {
      this.#drop('association-limit', ctx);
      return;
    }
    const p = peer ?? this.#addPeer(ctx);
    if (p.handshake !== undefined) this.#abandonHandshake(p);
    const suite = CIPHER_SUITES.get(suiteId)!;
    const transcript = createHash(suite.hash);
    transcript.update(handshakeMessage(HandshakeType.clientHello, hv.messageSeq, body));
    const serverRandom = randomBytes(RANDOM_LENGTH);
    const serverHello = handshakeMessage(
      HandshakeType.serverHello,
      hv.messageSeq,
      serverHelloBody(serverRandom, suiteId, ch.extendedMasterSecret, ch.secureRenegotiation),
    );
    const serverHelloDone = handshakeMessage(HandshakeType.serverHelloDone, hv.messageSeq + 1, EMPTY);
    transcript.update(serverHello);
    transcript.update(serverHelloDone);
    const handshake: PendingHandshake = {
      state: 'await-client-key-exchange',
      suite,
      extendedMasterSecret: ch.extendedMasterSecret,
      clientRandom: Buffer.from(ch.random),
      serverRandom,
      clientHelloSeq: hv.messageSeq,
      transcript,
      epoch0Seq: rv.seq,
      flight: [serverHello, serverHelloDone],
      reassembler: new Reassembler(this.#options.maxHandshakeMessageBytes),
      replay: new ReplayWindow(),
      timer: setTimeout(() => this.#expireHandshake(p, handshake), this.#options.handshakeTimeoutMs),
    };
    handshake.timer.unref();
    p.handshake = handshake;
    this.#handshakes++;
    this.#pendingHandshakes.add(p);
    this.#handshakesPerIp.set(p.addressKey, (this.#handshakesPerIp.get(p.addressKey) ?? 0) + 1);
    ctx.peer = p;
    // The established association stays with the offload until this handshake completes; the
    // offload must let the handshake's flight (and its Finished, under new keys) through.
    if (p.association?.offloaded) this.#offload?.handshakePending?.(p.association, true);
    this.#sendServerHelloFlight(p, handshake);
  }

  #helloVerifyRequest(
    ctx: DatagramContext,
    rv: RecordView,
    hv: HandshakeView,
    ch: ClientHello,
    now: number,
  ): void {
    const cookie = this.#cookies.make(ctx.address, ctx.port, ch.beforeCookie, ch.afterCookie, now);
    // RFC 6347 §4.2.1: the record sequence number of the ClientHello, version 1.0 on the wire.
    const reply = plainRecord(
      ContentType.handshake,
      DTLS_1_0,
      0,
      rv.seq,
      handshakeMessage(HandshakeType.helloVerifyRequest, hv.messageSeq, helloVerifyRequestBody(cookie)),
    );
    if (reply.length > ctx.length) {
      // Never answer an unproven source with more bytes than it sent (no amplification).
      this.#drop('amplification', ctx);
      return;
    }
    this.#sendTo(ctx, reply);
  }

  #sendServerHelloFlight(peer: Peer, hs: PendingHandshake): void {
    const records = hs.flight.map((m) => plainRecord(ContentType.handshake, DTLS_1_2, 0, hs.epoch0Seq++, m));
    safeSend(peer.send, Buffer.concat(records));
  }

  #clientKeyExchange(ctx: DatagramContext, hv: HandshakeView, fragment: Buffer): void {
    const peer = ctx.peer;
    const hs = peer?.handshake;
    if (peer !== undefined && hs !== undefined && hv.messageSeq === hs.clientHelloSeq + 1) {
      if (hs.state !== 'await-client-key-exchange') return; // a copy from a retransmitted flight
      let body: Buffer | undefined;
      try {
        body = hs.reassembler.add(fragment, hv);
      } catch {
        this.#drop('bad-handshake-fragment', ctx);
        return;
      }
      if (body === undefined) return;
      let identity: Buffer;
      try {
        identity = Buffer.from(parseClientKeyExchange(body));
      } catch {
        this.#failHandshake(ctx, peer, AlertDescription.decodeError, 'malformed-client-key-exchange');
        return;
      }
      let psk: Buffer | undefined;
      try {
        psk = this.#options.pskFor(identity);
      } catch {
        psk = undefined;
      }
      if (psk === undefined || psk.length === 0 || psk.length > 0xffff) {
        this.#failHandshake(ctx, peer, AlertDescription.unknownPskIdentity, 'unknown-psk-identity');
        return;
      }
      hs.transcript.update(handshakeMessage(HandshakeType.clientKeyExchange, hv.messageSeq, body));
      // Hash of everything through ClientKeyExchange: RFC 7627's session hash, and also the hash
      // the client's Finished covers (it comes right after, CCS is not a handshake message).
      const sessionHash = hs.transcript.copy().digest();
      const master = masterSecret(
        hs.suite,
        pskPremasterSecret(psk),
        hs.extendedMasterSecret,
        sessionHash,
        hs.clientRandom,
        hs.serverRandom,
      );
      hs.master = master;
      hs.keys = trafficKeys(hs.suite, master, hs.clientRandom, hs.serverRandom);
      hs.identity = identity;
      hs.expectedClientVerify = verifyData(hs.suite, master, 'client', sessionHash);
      hs.state = 'await-finished';
      return;
    }
    const a = peer?.association;
    if (a !== undefined && a.finalFlight !== undefined && hv.messageSeq === a.clientKeyExchangeSeq) {
      // The client's last flight came again, so our CCS+Finished was lost. This copy is not
      // authenticated, hence 'checked': resent only if not larger than what arrived.
      if (ctx.resendFinal === 'no') ctx.resendFinal = 'checked';
      return;
    }
    this.#drop('unexpected-handshake', ctx);
  }

  #protectedRecord(ctx: DatagramContext, rv: RecordView, fragment: Buffer): void {
    const peer = ctx.peer;
    if (peer === undefined) {
      this.#drop('no-association', ctx);
      return;
    }
    const hs = peer.handshake;
    if (hs?.keys !== undefined && rv.type === ContentType.handshake) {
      if (!hs.replay.isFresh(rv.seq)) {
        this.#drop('replay', ctx);
        return;
      }
      const plaintext = hs.keys.client.open(rv.type, rv.version, rv.epoch, rv.seq, fragment);
      if (plaintext !== undefined) {
        hs.replay.mark(rv.seq);
        this.#clientFinished(ctx, peer, hs, plaintext);
        return;
      }
      if (
        peer.association === undefined ||
        // Still with the offload: it let this record through only because it did not authenticate
        // under the association's keys (the keys are not here meanwhile).
        peer.association.offloaded ||
        peer.association.read.open(rv.type, rv.version, 1, rv.seq, fragment) === undefined
      ) {
        // Keys derived from a different PSK than the client's: its Finished cannot even be read.
        this.#failHandshake(ctx, peer, AlertDescription.decryptError, 'bad-finished');
        return;
      }
      // else: an authenticated handshake record of the old association, handled below.
    }
    const a = peer.association;
    if (a === undefined) {
      this.#drop('no-association', ctx);
      return;
    }
    if (a.offloaded) {
      // The offload kept the association for this datagram: this record did not authenticate there.
      this.#drop('bad-record-mac', ctx);
      return;
    }
    if (fragment.length - a.read.overhead + 13 > this.#options.maxRecordPlaintext) {
      this.#drop('record-too-large', ctx);
      return;
    }
    if (!a.replay.isFresh(rv.seq)) {
      this.#drop('replay', ctx);
      return;
    }
    const plaintext = a.read.open(rv.type, rv.version, 1, rv.seq, fragment);
    if (plaintext === undefined) {
      this.#drop('bad-record-mac', ctx);
      return;
    }
    a.replay.mark(rv.seq);
    a.lastReceivedAt = Date.now();
    switch (rv.type) {
      case ContentType.applicationData:
        a.finalFlight = undefined; // the client has our Finished: nothing left to retransmit
        this.#emitSafe('message', a, plaintext);
        return;
      case ContentType.alert:
        if (
          plaintext.length >= 2 &&
          (plaintext[1] === AlertDescription.closeNotify || plaintext[0] === AlertLevel.fatal)
        ) {
          this.release(
            a,
            plaintext[1] === AlertDescription.closeNotify ? 'close-notify' : `alert-${plaintext[1]}`,
            false,
          );
        }
        return;
      case ContentType.handshake:
        this.#protectedHandshake(ctx, a, plaintext);
        return;
      default:
        this.#drop('unexpected-record', ctx);
    }
  }

  #protectedHandshake(ctx: DatagramContext, a: ServerAssociation, plaintext: Buffer): void {
    const hv = ctx.hv;
    try {
      readHandshake(plaintext, 0, plaintext.length, hv);
    } catch {
      this.#drop('malformed-handshake', ctx);
      return;
    }
    if (hv.msgType === HandshakeType.finished && hv.messageSeq === a.clientFinishedSeq) {
      if (a.finalFlight !== undefined) ctx.resendFinal = 'authenticated';
      return;
    }
    // Renegotiation is not offered (the ServerHello's renegotiation_info says so to RFC 5746 clients).
    this.#drop('renegotiation-refused', ctx);
  }

  #clientFinished(ctx: DatagramContext, peer: Peer, hs: PendingHandshake, plaintext: Buffer): void {
    const hv = ctx.hv;
    try {
      readHandshake(plaintext, 0, plaintext.length, hv);
    } catch {
      this.#failHandshake(ctx, peer, AlertDescription.decodeError, 'malformed-finished');
      return;
    }
    if (hv.msgType !== HandshakeType.finished || hv.messageSeq !== hs.clientHelloSeq + 2) {
      this.#drop('unexpected-handshake', ctx);
      return;
    }
    let body: Buffer | undefined;
    try {
      body = hs.reassembler.add(plaintext, hv);
    } catch {
      this.#drop('bad-handshake-fragment', ctx);
      return;
    }
    if (body === undefined) return;
    const expected = hs.expectedClientVerify!;
    if (body.length !== expected.length || !timingSafeEqual(body, expected)) {
      this.#failHandshake(ctx, peer, AlertDescription.decryptError, 'bad-finished');
      return;
    }
    hs.transcript.update(handshakeMessage(HandshakeType.finished, hv.messageSeq, body));
    const finished = handshakeMessage(
      HandshakeType.finished,
      hs.clientHelloSeq + 2,
      verifyData(hs.suite, hs.master!, 'server', hs.transcript.digest()),
    );
    clearTimeout(hs.timer);
    this.#countHandshakeDone(peer);
    peer.handshake = undefined;
    const keys = hs.keys!;
    const a = new ServerAssociation({
      owner: this,
      peer,
      identity: hs.identity!,
      suite: hs.suite,
      extendedMasterSecret: hs.extendedMasterSecret,
      read: keys.client,
      write: keys.server,
      replay: hs.replay,
      epoch0Seq: hs.epoch0Seq,
      finishedMessage: finished,
      clientKeyExchangeSeq: hs.clientHelloSeq + 1,
      clientFinishedSeq: hs.clientHelloSeq + 2,
      maxPlaintext: this.#options.maxRecordPlaintext,
    });
    const old = peer.association;
    peer.association = a;
    if (old === undefined) this.#associations++;
    this.#handshakesCompleted++;
    a.sendFinalFlight();
    this.#startSweeper();
    if (old !== undefined && !old.closed) {
      // RFC 6347 §4.2.8: the new association replaces the old only now that it is proven.
      this.#reclaim(old);
      if (!old.closed) {
        old.closed = true;
        this.#emitSafe('close', old, 'replaced');
      }
    }
    this.#emitSafe('association', a);
  }

  #statelessAlert(ctx: DatagramContext, seq: number, description: number, reason: string): void {
    this.#sendTo(
      ctx,
      plainRecord(ContentType.alert, DTLS_1_2, 0, seq, Buffer.from([AlertLevel.fatal, description])),
    );
    this.#drop(reason, ctx);
  }

  #failHandshake(ctx: DatagramContext, peer: Peer, description: number, reason: string): void {
    const hs = peer.handshake;
    if (hs === undefined) return;
    const alert = Buffer.from([AlertLevel.fatal, description]);
    safeSend(peer.send, plainRecord(ContentType.alert, DTLS_1_2, 0, hs.epoch0Seq++, alert));
    this.#abandonHandshake(peer);
    this.#drop(reason, ctx);
  }

  #expireHandshake(peer: Peer, hs: PendingHandshake): void {
    if (peer.handshake !== hs) return;
    this.#abandonHandshake(peer);
    this.#drop('handshake-timeout', peer);
  }

  #abandonHandshake(peer: Peer): void {
    const hs = peer.handshake;
    if (hs === undefined) return;
    clearTimeout(hs.timer);
    peer.handshake = undefined;
    this.#countHandshakeDone(peer);
    if (peer.association?.offloaded) this.#offload?.handshakePending?.(peer.association, false);
    this.#forgetPeerIfEmpty(peer);
  }

  #countHandshakeDone(peer: Peer): void {
    this.#handshakes--;
    this.#pendingHandshakes.delete(peer);
    const n = (this.#handshakesPerIp.get(peer.addressKey) ?? 1) - 1;
    if (n <= 0) this.#handshakesPerIp.delete(peer.addressKey);
    else this.#handshakesPerIp.set(peer.addressKey, n);
  }

  #addPeer(ctx: DatagramContext): Peer {
    const { address, port } = ctx;
    const socket = this.#socket;
    const send: Send = ctx.send ?? ((b) => socket?.send(b, port, address));
    const peer: Peer = {
      address,
      port,
      addressKey: addressKey(address),
      send,
      association: undefined,
      handshake: undefined,
    };
    let byPort = this.#peers.get(address);
    if (byPort === undefined) {
      byPort = new Map();
      this.#peers.set(address, byPort);
    }
    byPort.set(port, peer);
    return peer;
  }

  #forgetPeerIfEmpty(peer: Peer): void {
    if (peer.association !== undefined || peer.handshake !== undefined) return;
    const byPort = this.#peers.get(peer.address);
    if (byPort?.get(peer.port) !== peer) return;
    byPort.delete(peer.port);
    if (byPort.size === 0) this.#peers.delete(peer.address);
    // A later record of the same datagram must not attach state to the forgotten peer.
    for (let i = 0; i < this.#depth; i++)
      if (this.#contexts[i]!.peer === peer) this.#contexts[i]!.peer = undefined;
  }

  #sendTo(ctx: DatagramContext, datagram: Buffer): void {
    if (ctx.send !== undefined) safeSend(ctx.send, datagram);
    else if (this.#socket !== undefined)
      safeSend((b) => this.#socket?.send(b, ctx.port, ctx.address), datagram);
  }

  #startSweeper(): void {
    const idle = this.#options.associationIdleTimeoutMs;
    if (this.#sweeper !== undefined || idle === 0 || this.#closed) return;
    const every = Math.min(5000, Math.max(100, Math.floor(idle / 4)));
    this.#sweeper = setInterval(() => this.#sweep(idle), every);
    this.#sweeper.unref();
  }

  #sweep(idle: number): void {
    const now = Date.now();
    for (const byPort of [...this.#peers.values()]) {
      for (const peer of [...byPort.values()]) {
        const a = peer.association;
        if (a === undefined) continue;
        if (a.offloaded) {
          const ms = this.#offload?.idleMs(a);
          if (ms !== undefined) a.lastReceivedAt = Math.max(a.lastReceivedAt, now - ms);
        }
        if (now - a.lastReceivedAt >= idle) this.release(a, 'idle', true);
      }
    }
  }
}
