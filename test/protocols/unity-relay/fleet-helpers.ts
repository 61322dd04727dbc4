/** Shared pieces of the fleet tests: a relay chat between a host and a joiner, waiting helpers. */
import { expect } from 'vitest';
import {
  type AllocationJson,
  RelayApiClient,
  relayServerData,
  UnityRelayClient,
} from '../../../src/protocols/unity-relay/index.js';
import { waitFor } from '../../helpers/wait.js';

export const SECRET = 'fleet-test-secret-0123456789abcdef0123456789';
export const fast = { retryMs: 100, pingIntervalMs: 1000 };

export function once<T extends unknown[]>(emitter: UnityRelayClient, event: string, ms = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} within ${ms} ms`)), ms);
    emitter.once(event, (...args: unknown[]) => {
      clearTimeout(timer);
      resolve(args as T);
    });
  });
}

export async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const found = await waitFor(
    async () => {
      const v = await fn().catch(() => undefined);
      return v === undefined ? undefined : { v };
    },
    { what, timeoutMs: ms, intervalMs: 100 },
  );
  return found.v;
}

/** One message each way between a host and a client (RELAY through the node they share). */
export async function chat(host: UnityRelayClient, client: UnityRelayClient): Promise<void> {
  const atHost = once<[Buffer, Buffer]>(host, 'message');
  client.send(Buffer.from('hello host'));
  const [data, from] = await atHost;
  expect(data.toString()).toBe('hello host');
  expect(from.equals(client.allocationId)).toBe(true);
  const atClient = once<[Buffer, Buffer]>(client, 'message');
  host.send(Buffer.from('hello client'), client.allocationId);
  expect((await atClient)[0].toString()).toBe('hello client');
}

/** Hosts through `hostApi`, joins through `joinApi`; returns both clients bound and connected. */
export async function hostAndJoin(
  hostApi: string,
  joinApi: string,
  clients: UnityRelayClient[],
): Promise<{
  host: UnityRelayClient;
  client: UnityRelayClient;
  hostAllocation: AllocationJson;
  joinAllocation: AllocationJson;
}> {
  const {
    client: host,
    joinCode,
    allocation,
  } = await UnityRelayClient.host(new RelayApiClient(hostApi), 4, fast);
  clients.push(host);
  const joinAllocation = await new RelayApiClient(joinApi).join(joinCode);
  const client = new UnityRelayClient(relayServerData(joinAllocation), fast);
  clients.push(client);
  await client.bind();
  await client.connect();
  return { host, client, hostAllocation: allocation, joinAllocation };
}
