/**
 * What the Unity Relay checks share: the allocation API (with the retries a backend does on 429
 * and 503), the transport, and helpers that allocate and bind the way Unity Transport does.
 */
import { CheckFailure, type CheckRun, type ConformTarget } from '../../../core/conform.js';
import type { AllocationJson } from '../api.js';
import { type ConnectionType, createBind, type RelayApiClient } from '../client.js';
import { RelayApiError } from '../errors.js';
import { BIND_RECEIVED_BYTES, encodeMessage, padConnectionData } from '../messages.js';
import { type LinkOptions, openLink, type RelayLinkProbe } from './link.js';

export interface UnityConformContext {
  target: ConformTarget | undefined;
  apiUrl: string;
  api: RelayApiClient;
  transport: ConnectionType;
  link: LinkOptions;
  /** The relay's idle timeout the expiry check waits out (Unity's documented 10 s by default). */
  idleTimeoutMs: number;
}

/** An allocation as the checks use it (bytes decoded from the API's JSON). */
export interface Allocation {
  json: AllocationJson;
  id: Buffer;
  key: Buffer;
  connectionData: Buffer;
  /** The host's connection data (own for a host). */
  hostConnectionData: Buffer;
}

function toAllocation(json: AllocationJson): Allocation {
  const connectionData = padConnectionData(Buffer.from(json.connectionData, 'base64'));
  return {
    json,
    id: Buffer.from(json.allocationIdBytes, 'base64'),
    key: Buffer.from(json.key, 'base64'),
    connectionData,
    hostConnectionData:
      json.hostConnectionData === undefined
        ? connectionData
        : padConnectionData(Buffer.from(json.hostConnectionData, 'base64')),
  };
}

/** Calls the API, waiting and retrying on 429/503 as a backend does (within the check's time). */
async function withRetry<T>(t: CheckRun, what: string, call: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      const retriable = err instanceof RelayApiError && (err.status === 429 || err.status === 503);
      const wait = Math.min(4000, 500 * 2 ** attempt);
      if (!retriable || attempt >= 6 || t.remainingMs() < wait + 1000) {
        const detail = err instanceof RelayApiError ? err.message : `${(err as Error).message}`;
        throw new CheckFailure(`the allocation API could not ${what}: ${detail}`);
      }
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

export function allocate(ctx: UnityConformContext, t: CheckRun, maxConnections = 2): Promise<Allocation> {
  return withRetry(t, 'allocate', async () => toAllocation(await ctx.api.allocate(maxConnections)));
}

/** A host allocation and a client that joined it through a join code. */
export async function hostAndClient(
  ctx: UnityConformContext,
  t: CheckRun,
  maxConnections = 2,
): Promise<{ host: Allocation; client: Allocation; joinCode: string }> {
  const host = await allocate(ctx, t, maxConnections);
  const joinCode = await withRetry(t, 'make a join code', () => ctx.api.joinCode(host.json.allocationId));
  const client = await join(ctx, t, joinCode);
  return { host, client, joinCode };
}

export function join(ctx: UnityConformContext, t: CheckRun, joinCode: string): Promise<Allocation> {
  return withRetry(t, 'join', async () => toAllocation(await ctx.api.join(joinCode)));
}

export function open(ctx: UnityConformContext, t: CheckRun, a: Allocation): Promise<RelayLinkProbe> {
  return openLink(ctx.target!, t, ctx.link, { allocationId: a.id, key: a.key });
}

export const isBindReceived = (m: Buffer): boolean => m.equals(BIND_RECEIVED_BYTES);
export const isType = (type: number) => (m: Buffer) =>
  m.length >= 4 && m[0] === 0xda && m[1] === 0x72 && m[2] === 0 && m[3] === type;

/**
 * BINDs the way Unity Transport does (again every second until BIND_RECEIVED, at most 3 times
 * here) and returns the link bound. Fails with the exchange when no BIND_RECEIVED comes.
 */
export async function bind(link: RelayLinkProbe, a: Allocation, nonce = 0): Promise<Buffer> {
  const bytes = createBind(nonce, a.connectionData, a.key);
  for (let attempt = 0; attempt < 3; attempt++) {
    link.send(bytes);
    const got = await link.poll(isBindReceived, 1000);
    if (got !== undefined) return bytes;
  }
  throw new CheckFailure(
    'no BIND_RECEIVED for a valid BIND (sent 3 times, 1 s apart, as Unity Transport does)',
    {
      sent: bytes,
      expected: Buffer.from(BIND_RECEIVED_BYTES),
      received: link.inbox.tail(),
    },
  );
}

export async function bound(ctx: UnityConformContext, t: CheckRun, a: Allocation): Promise<RelayLinkProbe> {
  const link = await open(ctx, t, a);
  await bind(link, a);
  return link;
}

export const ping = (a: Allocation): Buffer =>
  encodeMessage({ type: 'PING', fromAllocationId: a.id, sequenceNumber: 1 });

export const relay = (from: Allocation, to: Allocation, data: Buffer): Buffer =>
  encodeMessage({ type: 'RELAY', fromAllocationId: from.id, toAllocationId: to.id, data });

export const connectRequest = (client: Allocation): Buffer =>
  encodeMessage({
    type: 'CONNECT_REQUEST',
    allocationId: client.id,
    toConnectionDataLength: 255,
    toConnectionData: client.hostConnectionData,
  });

/** A client bound and connected to its host (CONNECT_REQUEST → ACCEPTED), both links open. */
export async function connectedPair(
  ctx: UnityConformContext,
  t: CheckRun,
): Promise<{ host: Allocation; client: Allocation; hostLink: RelayLinkProbe; clientLink: RelayLinkProbe }> {
  const { host, client } = await hostAndClient(ctx, t);
  const hostLink = await bound(ctx, t, host);
  const clientLink = await bound(ctx, t, client);
  const request = connectRequest(client);
  for (let attempt = 0; attempt < 3; attempt++) {
    clientLink.send(request);
    if ((await clientLink.poll(isType(6), 1000)) !== undefined) return { host, client, hostLink, clientLink };
  }
  throw new CheckFailure('no ACCEPTED for CONNECT_REQUEST', {
    sent: request,
    received: clientLink.inbox.tail(),
  });
}

/** ERROR n for allocation `a`, exactly as Unity reads it: 21 bytes. */
export const errorBytes = (a: Allocation, code: number): Buffer =>
  encodeMessage({ type: 'ERROR', allocationId: a.id, errorCode: code });
