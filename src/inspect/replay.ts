/**
 * `gamewire replay FILE --target HOST:PORT`: plays the client side of each recorded session
 * back to a server and compares the server's replies with the recorded ones, message by
 * message and field by field, as decoded. A recorded session becomes a regression fixture.
 *
 * Each flow is replayed on its own connection (TCP) or socket (UDP), flows one after another.
 * Before each client send, the replay waits until the server has answered as many messages as
 * it had at that point in the recording (or `stepTimeoutMs` passes), so request/reply order is
 * kept without copying the recording's timing.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { Direction } from '../core/protocol.js';
import type { Json } from '../wire/codec.js';
import type { DecodeError } from '../wire/errors.js';
import {
  type DecoderOptions,
  decoderDefaults,
  type Emitter,
  findProtocol,
  loadFlowProtocols,
} from './protocols.js';
import { inspectBuffer, type RunOptions } from './run.js';

type Step = { send: Buffer } | { reply: Json };

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
  /** Field names never compared (timestamps, ids the server makes up). */
  ignore: ReadonlySet<string>;
}

/** The client sends and server messages of every decodable session in a capture, in order. */
export async function recordedFlows(capture: Buffer, options: RunOptions = {}): Promise<RecordedFlow[]> {
  const protocols = options.protocols ?? (await loadFlowProtocols());
  const flows = new Map<string, RecordedFlow>();
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
        flowOf(r.flow, r.transport, r.protocol).steps.push({ reply: r.message });
      }
    },
    {
      ...options,
      protocols,
      onPayload: (label, transport, protocol, direction, bytes) => {
        if (direction === 'client')
          flowOf(label, transport, protocol).steps.push({ send: Buffer.from(bytes) });
      },
    },
  );
  return [...flows.values()].filter((f) => f.steps.some((s) => 'send' in s));
}

function differences(
  flow: string,
  index: number,
  a: Json,
  b: Json,
  ignore: ReadonlySet<string>,
): Difference[] {
  const type = (a as { type?: string } | null)?.type ?? (b as { type?: string } | null)?.type;
  const out: Difference[] = [];
  const walk = (path: string, x: Json | undefined, y: Json | undefined): void => {
    const name = path.slice(path.lastIndexOf('.') + 1).replace(/\[\d+\]$/, '');
    if (ignore.has(name)) return;
    if (x !== null && y !== null && typeof x === 'object' && typeof y === 'object') {
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
    if (JSON.stringify(x) !== JSON.stringify(y)) {
      out.push({ flow, index, type, path, recorded: x, replayed: y });
    }
  };
  walk('', a, b);
  return out;
}

/** Replays one flow; resolves with the server messages it got. */
async function replayFlow(flow: RecordedFlow, options: ReplayOptions): Promise<Json[]> {
  const got: Json[] = [];
  const errors: DecodeError[] = [];
  let wake: (() => void) | undefined;
  const emitter: Emitter = {
    message: (d: Direction, m: Json) => {
      if (d === 'server') {
        got.push(m);
        wake?.();
      }
    },
    error: (d: Direction, e: DecodeError) => {
      if (d === 'server') errors.push(e);
    },
  };
  const protocols = await loadFlowProtocols();
  const decoderOptions: DecoderOptions = { ...decoderDefaults(protocols), ...options.decoder };
  const decoder = findProtocol(protocols, flow.protocol)!.create(emitter, decoderOptions);
  const waitFor = async (count: number): Promise<void> => {
    const deadline = Date.now() + options.stepTimeoutMs;
    while (got.length < count && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, Math.min(50, Math.max(1, deadline - Date.now())));
      });
    }
  };
  const sendSteps = async (send: (b: Buffer) => void, clientOffset: { n: number }): Promise<void> => {
    let expected = 0;
    for (const step of flow.steps) {
      if ('reply' in step) {
        expected++;
        continue;
      }
      await waitFor(expected);
      // The decoder follows the client side too (JS5 rekeys, handshakes).
      if (flow.transport === 'tcp') decoder.stream('client', step.send, clientOffset.n);
      else decoder.datagram('client', step.send);
      clientOffset.n += step.send.length;
      send(step.send);
    }
    await waitFor(expected);
  };
  if (flow.transport === 'tcp') {
    const socket = net.connect({ host: options.host, port: options.port });
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    let serverOffset = 0;
    socket.on('data', (chunk: Buffer) => {
      decoder.stream('server', chunk, serverOffset);
      serverOffset += chunk.length;
    });
    socket.on('error', () => {});
    await sendSteps((b) => socket.write(b), { n: 0 });
    socket.destroy();
  } else {
    const socket = dgram.createSocket(net.isIPv6(options.host) ? 'udp6' : 'udp4');
    socket.on('message', (m) => decoder.datagram('server', m));
    await new Promise<void>((resolve) => socket.connect(options.port, options.host, () => resolve()));
    await sendSteps((b) => socket.send(b), { n: 0 });
    socket.close();
  }
  return got;
}

export interface ReplayResult {
  flows: number;
  messages: number;
  differences: Difference[];
}

/** Replays every flow of a capture against one target. */
export async function replay(capture: Buffer, options: ReplayOptions): Promise<ReplayResult> {
  const flows = await recordedFlows(capture, options);
  const result: ReplayResult = { flows: flows.length, messages: 0, differences: [] };
  for (const flow of flows) {
    const recorded = flow.steps.flatMap((s) => ('reply' in s ? [s.reply] : []));
    const replayed = await replayFlow(flow, options);
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
      result.differences.push(...differences(flow.label, i, recorded[i]!, replayed[i]!, options.ignore));
    }
  }
  return result;
}
