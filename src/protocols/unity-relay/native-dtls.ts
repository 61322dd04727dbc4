/**
 * The DTLS record layer on the native data plane: a `DtlsRecordOffload` (src/transports/dtls/
 * offload.ts) over the native socket's DTLS port.
 *
 * The JavaScript `DtlsServer` keeps the handshake, alerts, timers and every rule; it is fed the
 * DTLS socket's datagrams by the native side (`serve`). Once an association is established, the
 * server hands its record layer over (`attach`: keys, IVs, epoch, next write sequence number,
 * replay window); from then on the native worker opens that peer's application records and either
 * forwards a RELAY itself (the relay's checks, made in C: see native/relay_dataplane.c) or hands
 * the plaintext to the server (`handleOffloadedRecord`). Records the server sends to it are sealed
 * natively with the next sequence number. Whenever the server needs the association's state, it
 * takes it back (`detach`) and hands it over again afterwards. Each association has a native id
 * from here, which the relay's bindings name (NativeDataplaneMirror.bound).
 *
 * Junk from a held association's address (anything that does not authenticate under its keys)
 * is dropped natively and never moves it; the server is told (`handleOffloadedDrop`) so its drop
 * counters stay the same on both planes. Keys live once: after `attach` the JavaScript Buffers
 * that carried them (the association's own) are zeroed; `detach` writes them back.
 */
import type { DtlsAssociation, DtlsServer } from '../../transports/dtls/index.js';
import type {
  DtlsRecordOffload,
  DtlsRecordProgress,
  DtlsRecordState,
  OffloadSendResult,
} from '../../transports/dtls/offload.js';
import { NativeDataplaneError } from './errors.js';
import type { NativeDtlsBindings, NativeRelaySocket } from './native-dataplane.js';

export class NativeDtlsRecords implements DtlsRecordOffload, NativeDtlsBindings {
  readonly socket: NativeRelaySocket;
  #nextId = 1;
  readonly #ids = new WeakMap<DtlsAssociation, number>();
  /** Associations by native id, from their first attach until they close. */
  readonly #byId = new Map<number, DtlsAssociation>();
  #server: DtlsServer | undefined;
  #paused = false;
  /** The key Buffers of each association held natively (zeroed here; `detach` refills them). */
  readonly #keys = new Map<number, DtlsRecordState>();

  constructor(socket: NativeRelaySocket) {
    if (socket.dtlsPort === undefined)
      throw new NativeDataplaneError('ERR_NATIVE_DATAPLANE', 'the native socket has no DTLS port');
    this.socket = socket;
  }

  /** Feeds `server` from the native DTLS socket and hands it the record layer of its associations. */
  serve(server: DtlsServer): void {
    this.#server = server;
    const socket = this.socket;
    socket.onDtlsDatagram = (msg, rinfo, keptBy) => {
      const { address, port } = rinfo;
      // keptBy: the native side inspected it for that association and still holds it.
      const kept = keptBy === 0 ? undefined : this.#byId.get(keptBy);
      server.handleDatagram(msg, rinfo, (datagram) => socket.dtlsSend(datagram, port, address), kept);
    };
    socket.onDtlsRecord = (id, plaintext, rinfo) => {
      const a = this.#byId.get(id);
      // Its association closed while the record was on its way: what the server does too.
      if (a === undefined) server.handleOffloadedDrop('no-association', rinfo);
      else server.handleOffloadedRecord(a, plaintext);
    };
    socket.onDtlsDrop = (reason, rinfo, count) => server.handleOffloadedDrop(reason, rinfo, count);
    server.on('close', (a) => {
      const id = this.#ids.get(a);
      if (id !== undefined) this.#byId.delete(id);
    });
    server.setRecordOffload(this.#paused ? undefined : this);
  }

  idOf(a: DtlsAssociation): number {
    let id = this.#ids.get(a);
    if (id === undefined) {
      id = this.#nextId;
      // 32-bit ids, never 0; a wrap after 4 billion associations skips ids still in use.
      do this.#nextId = this.#nextId >= 0xffffffff ? 1 : this.#nextId + 1;
      while (this.#byId.has(this.#nextId));
      this.#ids.set(a, id);
    }
    return id;
  }

  setPaused(paused: boolean): void {
    if (paused === this.#paused) return;
    this.#paused = paused;
    this.#server?.setRecordOffload(paused ? undefined : this);
  }

  attach(a: DtlsAssociation, s: DtlsRecordState): boolean {
    const h = this.socket.dtlsHandle;
    if (h === undefined || this.#paused || this.socket.isClosed) return false;
    const id = this.idOf(a);
    const ok = h.addon.dtlsAttach(
      h.handle,
      id,
      s.remoteAddress,
      s.remotePort,
      s.cipherSuite,
      s.epoch,
      s.readKey,
      s.readIv,
      s.writeKey,
      s.writeIv,
      s.writeSeq,
      s.replay.highest,
      s.replay.low,
      s.replay.high,
      s.maxPlaintext,
    );
    if (ok) {
      this.#byId.set(id, a);
      // Keys live once: the native side has them now; detach writes them back.
      this.#keys.set(id, s);
      s.readKey.fill(0);
      s.readIv.fill(0);
      s.writeKey.fill(0);
      s.writeIv.fill(0);
    }
    return ok;
  }

  detach(a: DtlsAssociation): DtlsRecordProgress | undefined {
    const h = this.socket.dtlsHandle;
    const id = this.#ids.get(a);
    if (h === undefined || id === undefined) return undefined;
    const k = this.#keys.get(id);
    this.#keys.delete(id);
    const r =
      k === undefined
        ? h.addon.dtlsDetach(h.handle, id)
        : h.addon.dtlsDetach(h.handle, id, k.readKey, k.readIv, k.writeKey, k.writeIv);
    if (r === null) return undefined;
    return {
      writeSeq: r[0]!,
      replay: { highest: r[1]!, low: r[2]!, high: r[3]! },
      idleMs: r[4]! < 0 ? undefined : r[4]!,
      applicationDataSeen: r[5] === 1,
    };
  }

  send(a: DtlsAssociation, contentType: number, plaintext: Buffer): OffloadSendResult {
    const h = this.socket.dtlsHandle;
    const id = this.#ids.get(a);
    if (h === undefined || id === undefined) return 'detached';
    const rc = h.addon.dtlsSeal(h.handle, id, contentType, plaintext);
    return rc === 0 ? 'sent' : rc === -2 ? 'exhausted' : 'detached';
  }

  handshakePending(a: DtlsAssociation, pending: boolean): void {
    const h = this.socket.dtlsHandle;
    const id = this.#ids.get(a);
    if (h !== undefined && id !== undefined && !this.socket.isClosed)
      h.addon.dtlsExpectHandshake(h.handle, id, pending);
  }

  serverAssociations(): number {
    return this.#server?.stats().associations ?? 0;
  }

  idleMs(a: DtlsAssociation): number | undefined {
    const h = this.socket.dtlsHandle;
    const id = this.#ids.get(a);
    if (h === undefined || id === undefined) return undefined;
    const ms = h.addon.dtlsIdle(h.handle, id);
    return ms < 0 ? undefined : ms;
  }
}
