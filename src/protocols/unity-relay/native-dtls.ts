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

  constructor(socket: NativeRelaySocket) {
    if (socket.dtlsPort === undefined)
      throw new NativeDataplaneError('ERR_NATIVE_DATAPLANE', 'the native socket has no DTLS port');
    this.socket = socket;
  }

  /** Feeds `server` from the native DTLS socket and hands it the record layer of its associations. */
  serve(server: DtlsServer): void {
    this.#server = server;
    const socket = this.socket;
    socket.onDtlsDatagram = (msg, rinfo) => {
      const { address, port } = rinfo;
      server.handleDatagram(msg, rinfo, (datagram) => socket.dtlsSend(datagram, port, address));
    };
    socket.onDtlsRecord = (id, plaintext, rinfo) => {
      const a = this.#byId.get(id);
      // Its association closed while the record was on its way: what the server does too.
      if (a === undefined) server.handleOffloadedDrop('no-association', rinfo);
      else server.handleOffloadedRecord(a, plaintext);
    };
    socket.onDtlsDrop = (reason, rinfo) => server.handleOffloadedDrop(reason, rinfo);
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
    if (ok) this.#byId.set(id, a);
    return ok;
  }

  detach(a: DtlsAssociation): DtlsRecordProgress | undefined {
    const h = this.socket.dtlsHandle;
    const id = this.#ids.get(a);
    if (h === undefined || id === undefined) return undefined;
    const r = h.addon.dtlsDetach(h.handle, id);
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

  idleMs(a: DtlsAssociation): number | undefined {
    const h = this.socket.dtlsHandle;
    const id = this.#ids.get(a);
    if (h === undefined || id === undefined) return undefined;
    const ms = h.addon.dtlsIdle(h.handle, id);
    return ms < 0 ? undefined : ms;
  }
}
