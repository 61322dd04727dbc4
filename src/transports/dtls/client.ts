import { createHash, type Hash, randomBytes, timingSafeEqual } from 'node:crypto';
import dgram from 'node:dgram';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import type { DtlsClientEventMap, DtlsClientOptions, DtlsClientRecordLayer } from './api.js';
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
import { DtlsError } from './errors.js';
import {
  clientHelloBody,
  clientKeyExchangeBody,
  HandshakeView,
  handshakeMessage,
  parseHelloVerifyRequest,
  parseServerHello,
  Reassembler,
  readHandshake,
} from './handshake.js';
import { masterSecret, pskPremasterSecret, type TrafficKeys, trafficKeys, verifyData } from './prf.js';
import { plainRecord, RecordView, ReplayWindow, readRecord } from './record.js';
import { CIPHER_SUITES, type CipherSuite, DEFAULT_CIPHER_SUITES } from './suites.js';

const CCS_BODY = Buffer.from([1]);
const MAX_RETRANSMIT_MS = 60_000;

/**
 * A DTLS 1.2 PSK client of the same subset as DtlsServer: for gamewire's own clients and tests.
 * One `send` is one record in one datagram; each received application record is one `message`.
 */
export class DtlsClient extends EventEmitter<DtlsClientEventMap> {
  readonly #socket: dgram.Socket;
  readonly #options: DtlsClientOptions;
  readonly #suites: number[];
  readonly #maxPlaintext: number;
  #state: 'hello' | 'await-server-hello' | 'await-finished' | 'open' | 'closed' = 'hello';
  #clientRandom = randomBytes(RANDOM_LENGTH);
  #cookie = Buffer.alloc(0);
  #messageSeq = 0;
  #epoch0Seq = 0;
  #writeSeq = 0;
  #nextServerSeq = 0;
  #transcript: Hash | undefined;
  #suite: CipherSuite | undefined;
  #ems = false;
  #serverRandom: Buffer | undefined;
  #keys: TrafficKeys | undefined;
  #expectedServerVerify: Buffer | undefined;
  readonly #replay = new ReplayWindow();
  readonly #reassembler = new Reassembler(4096);
  readonly #record = new RecordView();
  readonly #handshake = new HandshakeView();
  /** The last flight, rebuilt with fresh sequence numbers on each retransmission. */
  #flight: () => Buffer = () => Buffer.alloc(0);
  #retransmitTimer: NodeJS.Timeout | undefined;
  #retransmitMs: number;
  #deadline: NodeJS.Timeout | undefined;
  #settle: ((error?: Error) => void) | undefined;

  /** Handshakes with a DtlsServer (or any DTLS 1.2 PSK server) and resolves once both Finished verified. */
  static connect(options: DtlsClientOptions): Promise<DtlsClient> {
    const client = new DtlsClient(options);
    return client.#connect().then(() => client);
  }

  private constructor(options: DtlsClientOptions) {
    super();
    this.#options = options;
    this.#suites = options.cipherSuites ?? [...DEFAULT_CIPHER_SUITES];
    for (const id of this.#suites) {
      if (!CIPHER_SUITES.has(id))
        throw new DtlsError(
          'ERR_DTLS_BAD_OPTION',
          `DtlsClient does not implement cipher suite 0x${id.toString(16)}`,
        );
    }
    this.#maxPlaintext = options.maxRecordPlaintext ?? 1536;
    this.#retransmitMs = options.retransmitMs ?? 1000;
    this.#socket = dgram.createSocket(net.isIPv6(options.host) ? 'udp6' : 'udp4');
  }

  /** The suite the server chose (after connect). */
  get cipherSuite(): number {
    return this.#suite?.id ?? 0;
  }

  get extendedMasterSecret(): boolean {
    return this.#ems;
  }

  /** The local UDP address and port (for tests that need to tell this client's datagrams apart). */
  localAddress(): { address: string; port: number } {
    const a = this.#socket.address();
    return { address: a.address, port: a.port };
  }

  #connect(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#settle = (error) => {
        this.#settle = undefined;
        clearTimeout(this.#deadline);
        if (error === undefined) {
          resolve();
        } else {
          this.#shutdown();
          reject(error);
        }
      };
      this.#deadline = setTimeout(
        () => this.#settle?.(new DtlsError('ERR_DTLS_TIMEOUT', 'DTLS handshake timed out')),
        this.#options.timeoutMs ?? 10_000,
      );
      this.#socket.on('error', (e: NodeJS.ErrnoException) => {
        // ICMP "port unreachable" on a connected UDP socket is advisory (a server not up yet, or
        // restarting): retransmission and the handshake deadline decide, as for any lost datagram.
        if (e.code === 'ECONNREFUSED') return;
        if (this.#settle !== undefined) this.#settle(new DtlsError('ERR_DTLS_SOCKET', e.message));
        else this.#end('socket-error');
      });
      this.#socket.on('message', (msg) => {
        try {
          this.#datagram(msg);
        } catch {
          // Whatever a server sends, the client drops what it cannot use (like the server does).
        }
      });
      const connect = () =>
        this.#socket.connect(this.#options.port, this.#options.host, () => {
          this.#sendClientHello();
        });
      if (this.#options.localAddress === undefined) connect();
      else this.#socket.bind(0, this.#options.localAddress, connect);
    });
  }

  send(plaintext: Buffer): void {
    if (this.#state !== 'open') throw new DtlsError('ERR_DTLS_NOT_OPEN', 'DTLS client is not open');
    if (plaintext.length > this.#maxPlaintext) {
      throw new DtlsError(
        'ERR_DTLS_TOO_LARGE',
        `plaintext of ${plaintext.length} bytes exceeds ${this.#maxPlaintext}`,
      );
    }
    if (this.#writeSeq > MAX_SEQUENCE) {
      this.#end('sequence-exhausted');
      return;
    }
    this.#socket.send(this.#keys!.client.seal(ContentType.applicationData, 1, this.#writeSeq++, plaintext));
  }

  /**
   * Hands this open client's record layer to the caller (a load generator that seals and opens
   * records itself): the client stops reading its socket and sends nothing more; the caller gets
   * the connected socket, the suite, both directions' keys and the next sequence number, and
   * closes the socket when done.
   */
  detachRecordLayer(): DtlsClientRecordLayer {
    if (this.#state !== 'open' || this.#keys === undefined || this.#suite === undefined)
      throw new DtlsError('ERR_DTLS_NOT_OPEN', 'DTLS client is not open');
    this.#state = 'closed';
    clearTimeout(this.#retransmitTimer);
    this.#socket.removeAllListeners('message');
    const write = this.#keys.client.material();
    const read = this.#keys.server.material();
    return {
      socket: this.#socket,
      cipherSuite: this.#suite.id,
      epoch: 1,
      writeKey: write.key,
      writeIv: write.iv,
      readKey: read.key,
      readIv: read.iv,
      writeSeq: this.#writeSeq,
    };
  }

  /** Sends close_notify and closes the socket. */
  close(): void {
    if (this.#state === 'closed') return;
    if (this.#state === 'open' && this.#writeSeq <= MAX_SEQUENCE) {
      const alert = Buffer.from([AlertLevel.warning, AlertDescription.closeNotify]);
      try {
        this.#socket.send(this.#keys!.client.seal(ContentType.alert, 1, this.#writeSeq++, alert));
      } catch {
        // The socket is already gone.
      }
    }
    this.#end('local-close');
  }

  #end(reason: string): void {
    if (this.#state === 'closed') return;
    const wasOpen = this.#state === 'open';
    this.#shutdown();
    if (wasOpen) this.emit('close', reason);
  }

  #shutdown(): void {
    this.#state = 'closed';
    clearTimeout(this.#retransmitTimer);
    clearTimeout(this.#deadline);
    // Let a close_notify queued just before leave the socket first.
    setImmediate(() => {
      try {
        this.#socket.close();
      } catch {
        // already closed
      }
    });
  }

  #sendFlight(flight: () => Buffer): void {
    this.#flight = flight;
    this.#retransmitMs = this.#options.retransmitMs ?? 1000;
    this.#transmit();
  }

  #transmit(): void {
    clearTimeout(this.#retransmitTimer);
    if (this.#state === 'closed' || this.#state === 'open') return;
    try {
      this.#socket.send(this.#flight());
    } catch {
      return;
    }
    this.#retransmitTimer = setTimeout(() => {
      this.#retransmitMs = Math.min(this.#retransmitMs * 2, MAX_RETRANSMIT_MS);
      this.#transmit();
    }, this.#retransmitMs);
  }

  #sendClientHello(): void {
    const seq = this.#messageSeq;
    const message = handshakeMessage(
      HandshakeType.clientHello,
      seq,
      clientHelloBody(
        this.#clientRandom,
        this.#cookie,
        this.#suites,
        this.#options.extendedMasterSecret ?? true,
      ),
    );
    this.#state = 'await-server-hello';
    // The first hello goes out as DTLS 1.0 on the record layer, like mbedTLS and OpenSSL do.
    const recordVersion = this.#cookie.length === 0 ? DTLS_1_0 : DTLS_1_2;
    this.#sendFlight(() => plainRecord(ContentType.handshake, recordVersion, 0, this.#epoch0Seq++, message));
    this.#pendingClientHello = message;
  }

  #pendingClientHello: Buffer | undefined;

  #datagram(msg: Buffer): void {
    const rv = this.#record;
    let offset = 0;
    while (offset < msg.length) {
      if (readRecord(msg, offset, rv) !== undefined) return;
      offset = rv.end;
      const fragment = msg.subarray(rv.fragmentStart, rv.end);
      let plaintext: Buffer | undefined = fragment;
      if (rv.epoch === 1) {
        if (this.#keys === undefined || !this.#replay.isFresh(rv.seq)) continue;
        plaintext = this.#keys.server.open(rv.type, rv.version, rv.epoch, rv.seq, fragment);
        if (plaintext === undefined) continue; // RFC 6347 §4.1.2.7: drop silently
        this.#replay.mark(rv.seq);
      } else if (rv.epoch !== 0) {
        continue;
      }
      this.#handleRecord(rv.type, rv.epoch, plaintext);
      if (this.#state === 'closed') return;
    }
  }

  #handleRecord(type: number, epoch: number, plaintext: Buffer): void {
    switch (type) {
      case ContentType.applicationData:
        if (epoch === 1 && this.#state === 'open') this.emit('message', plaintext);
        return;
      case ContentType.alert:
        this.#alert(epoch, plaintext);
        return;
      case ContentType.handshake:
        this.#handshakeRecord(epoch, plaintext);
        return;
      default:
        return; // CCS: the server's Finished (epoch 1) is what counts
    }
  }

  #alert(epoch: number, plaintext: Buffer): void {
    if (plaintext.length < 2) return;
    const [level, description] = [plaintext[0]!, plaintext[1]!];
    if (this.#settle !== undefined) {
      if (level === AlertLevel.fatal) {
        this.#settle(new DtlsError('ERR_DTLS_ALERT', `server sent fatal alert ${description}`, description));
      }
      return;
    }
    // After the handshake only authenticated alerts count: an epoch-0 one could be forged.
    if (epoch === 1 && (description === AlertDescription.closeNotify || level === AlertLevel.fatal)) {
      this.#end(description === AlertDescription.closeNotify ? 'close-notify' : `alert-${description}`);
    }
  }

  #handshakeRecord(epoch: number, plaintext: Buffer): void {
    const hv = this.#handshake;
    let offset = 0;
    while (offset < plaintext.length) {
      readHandshake(plaintext, offset, plaintext.length, hv);
      offset = hv.end;
      if (hv.msgType === HandshakeType.helloVerifyRequest) {
        if (this.#state !== 'await-server-hello' || epoch !== 0) continue;
        const { cookie } = parseHelloVerifyRequest(plaintext.subarray(hv.bodyStart, hv.end));
        if (cookie.length === 0) continue;
        this.#cookie = Buffer.from(cookie);
        this.#messageSeq = hv.messageSeq + 1;
        this.#sendClientHello();
        continue;
      }
      if (hv.messageSeq < this.#nextServerSeq) continue; // a copy we already have
      const body = this.#reassembler.add(plaintext, hv);
      if (body === undefined) continue;
      this.#serverMessage(epoch, hv.msgType, hv.messageSeq, body);
      if (this.#state === 'closed') return;
    }
  }

  #serverMessage(epoch: number, msgType: number, messageSeq: number, body: Buffer): void {
    const message = handshakeMessage(msgType, messageSeq, body);
    if (msgType === HandshakeType.serverHello && this.#state === 'await-server-hello' && epoch === 0) {
      const sh = parseServerHello(body);
      const suite = CIPHER_SUITES.get(sh.suite);
      if (
        sh.serverVersion !== DTLS_1_2 ||
        suite === undefined ||
        !this.#suites.includes(sh.suite) ||
        sh.compression !== 0
      ) {
        this.#settle?.(
          new DtlsError(
            'ERR_DTLS_HANDSHAKE',
            `server chose what was not offered (suite 0x${sh.suite.toString(16)})`,
          ),
        );
        return;
      }
      this.#suite = suite;
      this.#ems = sh.extendedMasterSecret && (this.#options.extendedMasterSecret ?? true);
      this.#serverRandom = Buffer.from(sh.random);
      this.#transcript = createHash(suite.hash);
      this.#transcript.update(this.#pendingClientHello!);
      this.#transcript.update(message);
      this.#nextServerSeq = messageSeq + 1;
      return;
    }
    if (
      msgType === HandshakeType.serverHelloDone &&
      this.#suite !== undefined &&
      this.#state === 'await-server-hello'
    ) {
      if (messageSeq !== this.#nextServerSeq) return;
      this.#transcript!.update(message);
      this.#nextServerSeq = messageSeq + 1;
      this.#sendKeyExchange();
      return;
    }
    if (msgType === HandshakeType.finished && this.#state === 'await-finished' && epoch === 1) {
      if (
        body.length !== this.#expectedServerVerify!.length ||
        !timingSafeEqual(body, this.#expectedServerVerify!)
      ) {
        this.#settle?.(new DtlsError('ERR_DTLS_HANDSHAKE', 'server Finished does not verify'));
        return;
      }
      this.#state = 'open';
      clearTimeout(this.#retransmitTimer);
      this.#settle?.();
      return;
    }
    // Certificate, ServerKeyExchange (identity hints) and anything else: this client ignores them
    // but keeps them in the transcript, as RFC 5246 requires.
    if (
      this.#transcript !== undefined &&
      this.#state === 'await-server-hello' &&
      messageSeq === this.#nextServerSeq
    ) {
      this.#transcript.update(message);
      this.#nextServerSeq = messageSeq + 1;
    }
  }

  #sendKeyExchange(): void {
    const suite = this.#suite!;
    const transcript = this.#transcript!;
    const cke = handshakeMessage(
      HandshakeType.clientKeyExchange,
      ++this.#messageSeq,
      clientKeyExchangeBody(this.#options.identity),
    );
    transcript.update(cke);
    const sessionHash = transcript.copy().digest();
    const master = masterSecret(
      suite,
      pskPremasterSecret(this.#options.psk),
      this.#ems,
      sessionHash,
      this.#clientRandom,
      this.#serverRandom!,
    );
    this.#keys = trafficKeys(suite, master, this.#clientRandom, this.#serverRandom!);
    const finished = handshakeMessage(
      HandshakeType.finished,
      ++this.#messageSeq,
      verifyData(suite, master, 'client', sessionHash),
    );
    transcript.update(finished);
    this.#expectedServerVerify = verifyData(suite, master, 'server', transcript.copy().digest());
    this.#state = 'await-finished';
    const keys = this.#keys;
    this.#sendFlight(() =>
      Buffer.concat([
        plainRecord(ContentType.handshake, DTLS_1_2, 0, this.#epoch0Seq++, cke),
        plainRecord(ContentType.changeCipherSpec, DTLS_1_2, 0, this.#epoch0Seq++, CCS_BODY),
        keys.client.seal(ContentType.handshake, 1, this.#writeSeq++, finished),
      ]),
    );
  }
}
