/** The worked example of docs/rmc.md ("Writing a protocol handler"), run as written. */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import {
  defineProtocol,
  LoginProtocol,
  list,
  method,
  qString,
  RmcClient,
  RmcError,
  RmcServer,
  registerBuiltins,
  u32,
  uuid,
} from '../../../src/protocols/rmc/index.js';

const ProfileProtocol = defineProtocol('ProfileProtocol', 'player profiles', {
  GetProfile_V1: method({
    args: { pid: uuid },
    results: { name: qString, level: u32, badges: list(qString) },
    layout: 'unknown',
    doc: 'PID -> name, level, badges',
  }),
  SetLevel_V1: method({ args: { level: u32 }, results: {}, layout: 'unknown', doc: 'sets own level' }),
});

describe('docs/rmc.md worked example', () => {
  it('runs as documented', async () => {
    const profiles = new Map<string, { name: string; level: number }>();
    const server = new RmcServer({ maxFrameBytes: 64 * 1024, idleTimeoutMs: 60_000, log: silentLogger() });
    server.register(ProfileProtocol, {
      async GetProfile_V1(_ctx, { pid }) {
        const p = profiles.get(pid.toString('hex'));
        if (p === undefined) throw RmcError.of('RendezVous::InvalidPID');
        return { name: p.name, level: p.level, badges: [] };
      },
      SetLevel_V1(ctx, { level }) {
        const user = ctx.connection.user;
        if (user === undefined) throw RmcError.of('RendezVous::NotAuthenticated');
        profiles.set(user.pid.toString('hex'), { name: user.name, level });
        ctx.connection.onDisconnect(() => ctx.log.info({ pid: user.pid }, 'bye'));
        return {};
      },
    });
    registerBuiltins(server);
    const { port, close } = await server.listen({ host: '127.0.0.1', port: 0 });
    const client = await RmcClient.connect({ host: '127.0.0.1', port });
    try {
      await expect(client.call(ProfileProtocol, 'SetLevel_V1', { level: 7 })).rejects.toMatchObject({
        namespace: 'RendezVous',
        code: 0x02,
      });
      const { userPid } = await client.call(LoginProtocol, 'LoginWithToken_V1', {
        token: 'dev-ticket',
        clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
        connectionData: {
          urlRegularProtocols: 'prudp:/',
          lstSpecialProtocols: [],
          urlSpecialProtocols: 'prudp:/',
        },
      });
      await expect(client.call(ProfileProtocol, 'GetProfile_V1', { pid: userPid })).rejects.toMatchObject({
        code: 0x6b,
      });
      await client.call(ProfileProtocol, 'SetLevel_V1', { level: 7 });
      const profile = await client.call(ProfileProtocol, 'GetProfile_V1', { pid: userPid });
      expect(profile).toEqual({ name: expect.stringMatching(/^ticket:/), level: 7, badges: [] });
    } finally {
      await client.close();
      await close();
    }
  });
});
