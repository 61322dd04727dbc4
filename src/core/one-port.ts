/**
 * Two listeners that share one port number: a protocol's TCP listener and its UDP socket (NoxVR
 * Relay, `rmc --rmc-transport both`), so one number names both.
 *
 * With a fixed port both simply bind it. With port 0 the first listener gets a free port from the
 * system, but that number may already be held by another program's socket of the second kind (TCP
 * and UDP ports are separate tables): then the first is closed and both are tried again with a new
 * number, a few times, before the error reaches the user.
 */

/** How many port numbers port 0 tries before giving up. */
export const ONE_PORT_ATTEMPTS = 16;

export interface OnePortListeners<A, B> {
  first: A;
  second: B;
  port: number;
}

export async function listenOnOnePort<A, B>(
  port: number,
  first: (port: number) => Promise<A>,
  portOf: (first: A) => number,
  closeFirst: (first: A) => Promise<void>,
  second: (port: number) => Promise<B>,
  attempts = ONE_PORT_ATTEMPTS,
): Promise<OnePortListeners<A, B>> {
  for (let attempt = 1; ; attempt++) {
    const a = await first(port);
    const bound = portOf(a);
    try {
      return { first: a, second: await second(bound), port: bound };
    } catch (err) {
      await closeFirst(a);
      const taken = (err as { code?: unknown }).code === 'EADDRINUSE';
      if (port !== 0 || !taken || attempt >= attempts) throw err;
    }
  }
}
