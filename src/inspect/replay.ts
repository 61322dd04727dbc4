/**
 * `gamewire replay FILE --target HOST:PORT`: plays the client side of each recorded session
 * back to a server and compares the server's replies with the recorded ones, message by
 * message and field by field, as decoded. A recorded session becomes a regression fixture.
 *
 * Every flow gets its own connection (TCP) or socket (UDP), and all of them are open at once:
 * the client sends of all flows go out in the recording's order, one after another. Before each
 * send, the replay waits until every flow has received as many server messages as it had at that
 * point of the recording (or `stepTimeoutMs` passes), so what one client's message makes the
 * server send to another (a join, a relayed update) comes where it came in the recording. Sends
 * are also never closer together than they were recorded (`pace`), so a server that merges or
 * holds back updates sent too close together (a rate limit) sees the same spacing.
 *
 * Server-made values (ids from a counter, ports, cookies, clocks) are compared as each protocol
 * declares (`FlowProtocol.replay`): by consistency within a flow, or not at all.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { FlowProtocol, ReplayComparison } from '../core/flow.js';
import type { Direction } from '../core/protocol.js';
import type { Json } from '../wire/codec.js';
import {
  type DecoderOptions,
  decoderDefaults,
  type Emitter,
  type FlowDecoder,
  findProtocol,
  loadFlowProtocols,
} from './protocols.js';
import { inspectBuffer, type RunOptions } from './run.js';

/** One event of a recorded flow; `at` orders the events of all flows as they were captured. */
type Step = { at: number } & ({ send: Buffer; timeUs: number } | { reply: Json });

export interface RecordedFlow {
  label: string;
  transport: 'tcp' | 'udp';
  protocol: string;
  steps: Step[];
}

export interface Difference {
  flow: string;
  /** Index of the server message in the flow. */
  index: number;
  type: string | undefined;
  /** Field path (`results.pidConnectionID`), or '' for a whole message missing or extra. */
  path: string;
  recorded: Json | undefined;
  replayed: Json | undefined;
}

export interface ReplayOptions extends RunOptions {
  host: string;
  port: number;
  /** Longest wait for the server's replies before each send and at the end of a flow. */
  stepTimeoutMs: number;
  /** Field names never compared, on top of what each protocol declares (`FlowProtocol.replay`). */
  ignore: ReadonlySet<string>;
  /** Compare every field exactly, ignoring what the protocols declare (default false). */
  compareAll?: boolean;
  /** Keep sends at least as far apart as they were recorded (default true). */
  pace?: boolean;
}

/** The client sends and server messages of every decodable session in a capture, in order. */
export async function recordedFlows(capture: Buffer, options: RunOptions = {}): Promise<RecordedFlow[]> {
  const protocols = options.protocols ?? (await loadFlowProtocols());
  const flows = new Map<string, RecordedFlow>();
  let at = 0;
  const flowOf = (label: string, transport: 'tcp' | 'udp', protocol: string): RecordedFlow => {
    let f = flows.get(label);
    if (f === undefined) {
      f = { label, transport, protocol, steps: [] };
      flows.set(label, f);
    }
    return f;
  };
  inspectBuffer(
    capture,
    (r) => {
      if (r.direction === 'server' && r.message !== undefined) {
        flowOf(r.flow, r.transport, r.protocol).steps.push({ at: at++, reply: r.message });
      }
    },
    {
      ...options,
      protocols,
      onPayload: (label, transport, protocol, direction, bytes, timeUs) => {
        if (direction === 'client')
          flowOf(label, transport, protocol).steps.push({ at: at++, send: Buffer.from(bytes), timeUs });
      },
    },
  );
  return [...flows.values()].filter((f) => f.steps.some((s) => 'send' in s));
}

/** A field name's rule in one flow: compared exactly, not at all, or by consistency. */
class Comparison {
  private readonly ignored: ReadonlySet<string>;
  /** Field name → its group's mappings (recorded → replayed and back), shared by the group. */
  private readonly groups = new Map<string, { to: Map<string, string>; from: Map<string, string> }>();

  constructor(ignore: ReadonlySet<string>, declared: ReplayComparison | undefined) {
    this.ignored = new Set([...ignore, ...(declared?.ignore ?? [])]);
    for (const g of declared?.consistent ?? []) {
      const names = typeof g === 'string' ? [g] : g;
      const maps = { to: new Map<string, string>(), from: new Map<string, string>() };
      for (const n of names) if (!this.ignored.has(n)) this.groups.set(n, maps);
    }
  }

  ignores(name: string): boolean {
    return this.ignored.has(name);
  }

  /**
   * For a consistent field: true when the pair keeps the flow's mapping (and records it the first
   * time either value is seen); undefined when the field is compared exactly.
   */
  consistent(name: string, x: Json | undefined, y: Json | undefined): boolean | undefined {
    const maps = this.groups.get(name);
    // Present against absent (or null) is a real difference, whatever the field.
    if (maps === undefined || x === undefined || y === undefined || x === null || y === null)
      return undefined;
    const a = JSON.stringify(x);
    const b = JSON.stringify(y);
    const to = maps.to.get(a);
    const from = maps.from.get(b);
    if (to === undefined && from === undefined) {
      maps.to.set(a, b);
      maps.from.set(b, a);
      return true;
    }
    return to === b && from === a;
  }
}

function differences(flow: string, index: number, a: Json, b: Json, rules: Comparison): Difference[] {
  const type = (a as { type?: string } | null)?.type ?? (b as { type?: string } | null)?.type;
  const out: Difference[] = [];
  const walk = (path: string, x: Json | undefined, y: Json | undefined): void => {
    const name = path.slice(path.lastIndexOf('.') + 1).replace(/\[\d+\]$/, '');
    if (rules.ignores(name)) return;
    const kept = rules.consistent(name, x, y);
    if (kept === true) return;
    if (kept === undefined && x !== null && y !== null && typeof x === 'object' && typeof y === 'object') {
      if (Array.isArray(x) && Array.isArray(y)) {
        const n = Math.max(x.length, y.length);
        for (let i = 0; i < n; i++) walk(`${path}[${i}]`, x[i], y[i]);
        return;
      }
      if (!Array.isArray(x) && !Array.isArray(y)) {
        const keys = new Set([...Object.keys(x), ...Object.keys(y)]);
        for (const k of keys) walk(path === '' ? k : `${path}.${k}`, x[k], y[k]);
        return;
      }
    }
    if (kept === false || JSON.stringify(x) !== JSON.stringify(y)) {
      out.push({ flow, index, type, path, recorded: x, replayed: y });
    }
  };
  walk('', a, b);
  return out;
}

/** One flow being replayed: its socket, its decoder and the server messages it got. */
class LiveFlow {
  readonly got: Json[] = [];
  /** Server messages the recording had for this flow up to the replay's current point. */
  expected = 0;
  private send?: (b: Buffer) => void;
  private end?: () => void;
  private opening?: Promise<void>;
  private clientOffset = 0;
  private readonly decoder: FlowDecoder;
  readonly flow: RecordedFlow;

  constructor(
    flow: RecordedFlow,
    decoderOptions: DecoderOptions,
    protocols: readonly FlowProtocol<any>[],
    onMessage: (f: LiveFlow) => void,
  ) {
    this.flow = flow;
    const emitter: Emitter = {
      message: (d: Direction, m: Json) => {
        if (d !== 'server') return;
        this.got.push(m);
        onMessage(this);
      },
      error: () => {},
    };
    this.decoder = findProtocol(protocols, flow.protocol)!.create(emitter, decoderOptions);
  }

  /** Connects (TCP) or binds (UDP) on the first send. */
  open(host: string, port: number): Promise<void> {
    this.opening ??= (async () => {
      if (this.flow.transport === 'tcp') {
        const socket = net.connect({ host, port });
        socket.setNoDelay(true);
        await new Promise<void>((resolve, reject) => {
          socket.once('connect', resolve);
          socket.once('error', reject);
        });
        let serverOffset = 0;
        socket.on('data', (chunk: Buffer) => {
          this.decoder.stream('server', chunk, serverOffset);
          serverOffset += chunk.length;
        });
        socket.on('error', () => {});
        this.send = (b) => socket.write(b);
        this.end = () => socket.destroy();
      } else {
        const socket = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
        socket.on('message', (m) => this.decoder.datagram('server', m));
        socket.on('error', () => {});
        await new Promise<void>((resolve) => socket.connect(port, host, () => resolve()));
        this.send = (b) => socket.send(b);
        this.end = () => socket.close();
      }
    })();
    return this.opening;
  }

  write(bytes: Buffer): void {
    // The decoder follows the client side too (JS5 rekeys, handshakes).
    if (this.flow.transport === 'tcp') this.decoder.stream('client', bytes, this.clientOffset);
    else this.decoder.datagram('client', bytes);
    this.clientOffset += bytes.length;
    this.send!(bytes);
  }

  close(): void {
    this.end?.();
    this.end = undefined;
  }
}

export interface ReplayResult {
  flows: number;
  messages: number;
  differences: Difference[];
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Replays every flow of a capture against one target. */
export async function replay(capture: Buffer, options: ReplayOptions): Promise<ReplayResult> {
  const protocols = options.protocols ?? (await loadFlowProtocols());
  const flows = await recordedFlows(capture, { ...options, protocols });
  const decoderOptions: DecoderOptions = { ...decoderDefaults(protocols), ...options.decoder };
  // Flows still short of the server messages the recording had by now.
  let behind = 0;
  let wake: (() => void) | undefined;
  const live = flows.map(
    (f) =>
      new LiveFlow(f, decoderOptions, protocols, (l) => {
        if (l.got.length <= l.expected) behind--;
        wake?.();
      }),
  );
  const waitReplies = async (): Promise<void> => {
    const deadline = Date.now() + options.stepTimeoutMs;
    while (behind > 0 && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, Math.min(50, Math.max(1, deadline - Date.now())));
      });
    }
  };
  const events = live
    .flatMap((l) => l.flow.steps.map((step) => ({ l, step })))
    .sort((x, y) => x.step.at - y.step.at);
  const lastOf = new Map(live.map((l) => [l, l.flow.steps.at(-1)!.at]));
  let paced: { recordedUs: number; sentMs: number } | undefined;
  try {
    for (const { l, step } of events) {
      // A flow's connection opens at its first event (a server may speak first).
      await l.open(options.host, options.port);
      if ('reply' in step) {
        l.expected++;
        if (l.got.length < l.expected) behind++;
      } else {
        await waitReplies();
        if (options.pace !== false && paced !== undefined) {
          const due = paced.sentMs + (step.timeUs - paced.recordedUs) / 1000;
          const now = performance.now();
          if (due > now) await sleep(due - now);
        }
        paced = { recordedUs: step.timeUs, sentMs: performance.now() };
        l.write(step.send);
      }
      // A flow ends where its recording ended, once its replies are in.
      if (step.at === lastOf.get(l)) {
        await waitReplies();
        l.close();
      }
    }
  } finally {
    for (const l of live) l.close();
  }

  const result: ReplayResult = { flows: flows.length, messages: 0, differences: [] };
  for (const l of live) {
    const flow = l.flow;
    const recorded = flow.steps.flatMap((s) => ('reply' in s ? [s.reply] : []));
    const replayed = l.got;
    const declared = options.compareAll ? undefined : findProtocol(protocols, flow.protocol)?.replay;
    const rules = new Comparison(options.ignore, declared);
    result.messages += recorded.length;
    const n = Math.max(recorded.length, replayed.length);
    for (let i = 0; i < n; i++) {
      if (i >= recorded.length || i >= replayed.length) {
        const m = recorded[i] ?? replayed[i]!;
        result.differences.push({
          flow: flow.label,
          index: i,
          type: (m as { type?: string }).type,
          path: '',
          recorded: recorded[i],
          replayed: replayed[i],
        });
        continue;
      }
      result.differences.push(...differences(flow.label, i, recorded[i]!, replayed[i]!, rules));
    }
  }
  return result;
}
