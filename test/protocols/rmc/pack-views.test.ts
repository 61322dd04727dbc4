/**
 * Protocol packs in the live views and the conformance run: the admin endpoint's wire view of a
 * server that serves a pack shows its methods' arguments and results by name, and `gamewire
 * conform rmc --protocols PACK` calls every pack method (or those `--method` names) and fails a
 * server that answers in another layout.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runChecks } from '../../../src/core/conform.js';
import { silentLogger } from '../../../src/core/logger.js';
import { rmcAdmin } from '../../../src/protocols/rmc/admin.js';
import { rmcConform } from '../../../src/protocols/rmc/conform/index.js';
import { zeroBytes } from '../../../src/protocols/rmc/conform/pack.js';
import { type ProtocolPack, packProtocols } from '../../../src/protocols/rmc/ddl/pack.js';
import { registerPackProtocols } from '../../../src/protocols/rmc/ddl/register.js';
import { rmc } from '../../../src/protocols/rmc/index.js';
import { defineProtocol, method } from '../../../src/protocols/rmc/signature.js';
import { list, qResult, qString, u32 } from '../../../src/protocols/rmc/types.js';
import { type Admin, entry, eventually, startAdmin } from '../../dashboard/helpers.js';
import { runCliAsync } from '../../helpers/cli.js';
import { tempDir } from '../../inspect/helpers.js';
import { RawPeer, requestFrame, startServer, type TestServer, typedRequestFrame } from './helpers.js';

const PACK: ProtocolPack = {
  format: 'gamewire-rmc-pack',
  version: 1,
  sources: ['test'],
  types: {
    Data: { base: null, fields: [] },
    Score: {
      base: 'Data',
      fields: [
        { name: 'm_board', type: 'u32' },
        { name: 'm_name', type: 'qString' },
      ],
    },
  },
  protocols: [
    {
      name: 'LadderProtocol',
      id: 107,
      doc: '',
      methods: [
        {
          name: 'GetScores',
          id: 1,
          args: [
            { name: 'board', type: 'u32' },
            { name: 'names', type: { list: 'qString' } },
          ],
          results: [
            { name: 'retval', type: 'qResult' },
            { name: 'scores', type: { list: { class: 'Score' } } },
          ],
        },
        { name: 'Reset', id: 2, args: [{ name: 'board', type: 'u32' }], results: [] },
      ],
    },
  ],
  problems: [],
};

const [LADDER] = packProtocols(PACK);
const GET = LADDER!.byName.get('GetScores')!;

function packFile(): string {
  const file = path.join(tempDir('gamewire-pack-'), 'pack.json');
  fs.writeFileSync(file, JSON.stringify(PACK));
  return file;
}

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

async function served(handlers = true): Promise<TestServer> {
  const s = await startServer();
  cleanups.push(() => s.listening.close());
  if (handlers)
    s.server.register(LADDER!, {
      GetScores: (_c: unknown, a: any) => ({
        retval: 0x10001,
        scores: a.names.map((n: string, i: number) => ({ m_board: a.board, m_name: `${n}${i}` })),
      }),
    } as never);
  else registerPackProtocols(s.server, [LADDER!], silentLogger());
  return s;
}

describe('the wire view of a server with a pack', () => {
  it('shows pack calls and answers by name', async () => {
    const s = await served();
    const source = rmcAdmin({ dispatcher: s.server.dispatcher, variant: 'hyperscape' });
    const running = { endpoints: s.listening.endpoints, admin: source, close: () => s.listening.close() };
    const admin: Admin = await startAdmin([entry(rmc, running, s.metrics)]);
    cleanups.push(() => admin.admin.close());
    await admin.json('/api/wire/rmc');
    const peer = await RawPeer.connect(s.port);
    cleanups.push(() => peer.destroy());
    const reply = await peer.call(typedRequestFrame(GET, 9, { board: 3, names: ['ann', 'bob'] }), 9);
    expect(reply?.type).toBe('response');
    // A pack method without a handler answers NotImplemented, shown by name too.
    expect(
      (await peer.call(requestFrame('LadderProtocol', 'LadderProtocol::Reset', 10, Buffer.alloc(4)), 10))
        ?.type,
    ).toBe('error');
    const page = await eventually(async () => {
      const w = await admin.json<any>('/api/wire/rmc?limit=500');
      return w.messages.length >= 4 ? w : undefined;
    });
    const call = page.messages.find((m: any) => m.direction === 'client' && m.fields.callId === 9);
    expect(call.fields).toMatchObject({
      type: 'request',
      method: 'LadderProtocol::GetScores',
      args: { board: 3, names: ['ann', 'bob'] },
    });
    const answer = page.messages.find((m: any) => m.direction === 'server' && m.fields.callId === 9);
    expect(answer.fields.results).toEqual({
      retval: 0x10001,
      scores: [
        { m_board: 3, m_name: 'ann0' },
        { m_board: 3, m_name: 'bob1' },
      ],
    });
    const reset = page.messages.find((m: any) => m.direction === 'client' && m.fields.callId === 10);
    expect(reset.fields.args).toEqual({ board: 0 });
    const calls = (await admin.json<any>('/api/servers/rmc')).state.recentCalls;
    expect(calls.map((c: any) => c.method)).toContain('LadderProtocol::GetScores');
  });
});

describe('gamewire conform rmc --protocols', () => {
  const run = async (port: number, options: Record<string, string>) =>
    runChecks(
      rmcConform,
      await rmcConform.prepare({ host: '127.0.0.1', port }, { transport: 'tcp', ...options }),
    );

  it('calls every pack method: answers in the pack layout and RMC errors pass', async () => {
    const s = await served();
    const file = packFile();
    const results = await run(s.port, { protocols: file });
    const pack = results.find((r) => r.id === 'rmc.pack')!;
    expect(pack.status, pack.message).toBe('pass');
    expect(pack.message).toContain('1 answered in the pack');
    expect(pack.message).toContain('1 with an RMC error');
    // --method: only the named one; an unknown name is refused.
    const one = await run(s.port, { protocols: file, method: 'LadderProtocol::GetScores' });
    expect(one.find((r) => r.id === 'rmc.pack')!.message).toContain(
      "1 answered in the pack's layout, 0 with",
    );
    await expect(
      rmcConform.prepare(undefined, { protocols: file, method: 'LadderProtocol::Nope' }),
    ).rejects.toThrow(/no method of the packs/);
    // Without --protocols the check does not apply.
    const none = await run(s.port, {});
    expect(none.find((r) => r.id === 'rmc.pack')!.status).toBe('skip');
  });

  it('fails a server that answers a pack method in another layout', async () => {
    const s = await startServer();
    cleanups.push(() => s.listening.close());
    // The same method, answered with one field more than the pack declares.
    const wrong = defineProtocol('LadderProtocol', '', {
      GetScores: method({
        args: { board: u32, names: list(qString) },
        results: { retval: qResult, scores: list(u32), extra: u32 },
        layout: 'unknown',
        doc: '',
        id: 1,
      }),
    });
    s.server.register(wrong, { GetScores: () => ({ retval: 1, scores: [], extra: 5 }) } as never);
    const results = await run(s.port, { protocols: packFile(), method: 'LadderProtocol::GetScores' });
    const pack = results.find((r) => r.id === 'rmc.pack')!;
    expect(pack.status).toBe('fail');
    expect(pack.message).toContain('do not read as the pack declares them');
  });

  it('the CLI takes --protocols and --method', async () => {
    const s = await served(false);
    const r = await runCliAsync([
      'conform',
      'rmc',
      '--target',
      `127.0.0.1:${s.port}`,
      '--transport',
      'tcp',
      '--protocols',
      packFile(),
      '--check',
      'rmc.pack',
      '--json',
    ]);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).toContain('rmc.pack');
    expect(r.stdout).toContain('2 with an RMC error');
  });

  it('zero arguments: what each declaration reads from zeros, written canonically', () => {
    expect(zeroBytes(GET.args)!.toString('hex')).toBe('0000000000000000');
    expect(zeroBytes(qString)!.toString('hex')).toBe('010000');
  });
});
