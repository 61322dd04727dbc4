/**
 * The conformance checks over UDP (rmc's PRUDP peer, nox-relay's, the core's UDP probe) open one
 * session per check, each from a port of its own: a server still resending to an earlier check's
 * session must not reach a later one through a port the kernel handed out again (rmc's
 * prudp.checksum once took such a resend for an answer).
 */
import { describe, expect, it } from 'vitest';
import { bindFreshUdp } from '../../src/core/conform-probes.js';

describe('conformance sessions come from fresh ports', () => {
  it('1,500 sessions in a row: none reuses a port of the 1,024 before it (the kernel alone would)', async () => {
    const ports: number[] = [];
    for (let i = 0; i < 1500; i++) {
      const socket = await bindFreshUdp('udp4');
      ports.push(socket.address().port);
      await new Promise<void>((resolve) => socket.close(() => resolve()));
    }
    const reused = ports.filter((p, i) => ports.slice(Math.max(0, i - 1024), i).includes(p));
    expect(reused).toEqual([]);
  });
});
