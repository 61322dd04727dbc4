/**
 * `gamewire conform` against a target it cannot reach, as a newcomer gets it wrong: nothing
 * listens there, the name does not resolve, or a wss certificate this machine does not trust.
 * One error line saying so and what to do, not a failed check and a column of skips.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorOf, runCli, runCliAsync } from '../helpers/cli.js';
import { type RelayPorts, type Served, startUnityRelayServe } from '../helpers/serve.js';

async function closedPort(): Promise<number> {
  return new Promise<number>((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

describe('conform against a target nothing listens on', () => {
  for (const args of [
    ['js5'],
    ['nox-relay', '--transport', 'tcp'],
    ['rmc', '--transport', 'tcp'],
    ['unity-relay', '--transport', 'ws', '--api', 'http://127.0.0.1:1'],
  ]) {
    it(`conform ${args.join(' ')}: one line, exit 1`, async () => {
      const port = await closedPort();
      const r = runCli(['conform', args[0]!, '--target', `127.0.0.1:${port}`, ...args.slice(1)]);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      const e = errorOf(r);
      expect(e.code).toBe('ERR_CONFORM_UNREACHABLE');
      expect(e.message).toContain(`cannot reach 127.0.0.1:${port}`);
      expect(e.message).toContain('ECONNREFUSED');
      expect(e.message).toContain('--target');
    });
  }

  it('a name that does not resolve says so', () => {
    const r = runCli(['conform', 'js5', '--target', 'no-such-host.invalid:43594']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(errorOf(r).message).toMatch(/does not resolve/);
  });
});

describe('conform unity-relay --transport wss against the self-signed certificate', () => {
  let relay: Served;
  let wss: number;
  let api: string;
  beforeAll(async () => {
    let ports: RelayPorts;
    ({ relay, ports, api } = await startUnityRelayServe());
    wss = ports.wss;
  });
  afterAll(async () => {
    await relay?.stop();
  });

  it('suggests --ca or --insecure, in one line', async () => {
    const r = await runCliAsync([
      'conform',
      'unity-relay',
      '--target',
      `127.0.0.1:${wss}`,
      '--transport',
      'wss',
      '--api',
      api,
    ]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    const e = errorOf(r);
    expect(e.code).toBe('ERR_CONFORM_TLS');
    expect(e.message).toContain('--ca');
    expect(e.message).toContain('--insecure');
    expect(e.message).not.toMatch(/subprotocol/);
  });
});
