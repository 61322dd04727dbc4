/**
 * Smaller things a newcomer tripped over, each run as they ran it: `conform vcmp-rpc --target`
 * (a protocol with no server), and `serve` on a port that is taken (its error first and alone).
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { errorOf, runCli, runCliAsync } from '../helpers/cli.js';

describe('a protocol with no server', () => {
  for (const command of ['conform', 'load']) {
    it(`${command} vcmp-rpc --target … says vcmp-rpc has no server`, () => {
      const r = runCli([command, 'vcmp-rpc', '--target', '127.0.0.1:1']);
      expect(r.code).toBe(2);
      const e = errorOf(r);
      expect(e.code).toBe('ERR_USAGE');
      expect(e.message).toMatch(/^vcmp-rpc has no server/);
      expect(e.message).not.toContain('--target');
    });
  }
});

describe('serve on a port that is taken', () => {
  it('prints its error line alone, with no log line before it', async () => {
    const blocker = net.createServer();
    const port = await new Promise<number>((resolve) =>
      blocker.listen(0, '0.0.0.0', () => resolve((blocker.address() as net.AddressInfo).port)),
    );
    try {
      const r = await runCliAsync(['serve', 'js5', '--port', String(port), '--no-admin']);
      expect(r.code).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines, r.stderr).toHaveLength(1);
      expect(errorOf(r).code).toBe('ERR_LISTEN');
      expect(errorOf(r).message).toContain(`port ${port} is already in use`);
    } finally {
      blocker.close();
    }
  }, 60_000);
});
