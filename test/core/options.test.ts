/**
 * Typed options (src/core/options.ts): one declaration gives the `ServeOption` list the config
 * schema reads and the type `start()` receives; `completeOptions` (src/core/config.ts) gives a
 * library caller what `gamewire serve` gives a server: values checked, defaults filled, refusals
 * of options set without the one they need.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import { completeOptions } from '../../src/core/config.js';
import { ConfigError } from '../../src/core/errors.js';
import { defineServer, type Infer, option, serveOptions } from '../../src/core/options.js';
import { js5Server } from '../../src/protocols/js5/index.js';
import { noxRelay } from '../../src/protocols/nox-relay/index.js';
import { rmcServer } from '../../src/protocols/rmc/index.js';
import { unityRelayServer } from '../../src/protocols/unity-relay/server.js';

const declarations = {
  count: option.int({ flag: '--count <n>', description: 'count', default: 3, min: 1 }),
  limit: option.int({ flag: '--limit <n>', description: 'limit' }),
  mode: option.string({
    flag: '--mode <m>',
    description: 'mode',
    choices: ['fast', 'safe'],
    default: 'safe',
  }),
  name: option.string({ flag: '--name <s>', description: 'name' }),
  on: option.bool({ flag: '--on', description: 'on' }),
  tags: option.list({
    flag: '--tags <l>',
    description: 'tags',
    parse: (items) => items.map((i) => ({ tag: i })),
  }),
  width: option.string({
    flag: '--width <w>',
    description: 'width',
    choices: ['auto', '1', '4'],
    default: 'auto',
    parse: (v) => (v === 'auto' ? 'auto' : (Number(v) as 1 | 4)),
  }),
  store: option.string({ flag: '--store <url>', description: 'store' }),
  prefix: option.string({ flag: '--prefix <p>', description: 'prefix', default: 'x:', requires: 'store' }),
};

const server = defineServer({
  summary: 'fixture',
  defaultPort: 1000,
  options: declarations,
  async start(opts) {
    return {
      endpoints: [{ transport: 'tcp', host: opts.host, port: opts.port, description: String(opts.count) }],
      close: async () => {},
    };
  },
});

describe('typed options', () => {
  it('start() is typed from the declarations: a default means always there', () => {
    type O = Infer<typeof declarations>;
    expectTypeOf<O['count']>().toEqualTypeOf<number>();
    expectTypeOf<O['limit']>().toEqualTypeOf<number | undefined>();
    expectTypeOf<O['mode']>().toEqualTypeOf<'fast' | 'safe'>();
    expectTypeOf<O['name']>().toEqualTypeOf<string | undefined>();
    expectTypeOf<O['on']>().toEqualTypeOf<boolean>();
    expectTypeOf<O['tags']>().toEqualTypeOf<{ tag: unknown }[] | undefined>();
    expectTypeOf<O['width']>().toEqualTypeOf<'auto' | 1 | 4>();
    expectTypeOf<Parameters<typeof server.start>[0]['host']>().toEqualTypeOf<string>();
    expectTypeOf<Parameters<typeof server.start>[0]['port']>().toEqualTypeOf<number>();
    // The protocols' own: the fields their start() reads without converting.
    expectTypeOf<Parameters<typeof js5Server.start>[0]['profile']>().toEqualTypeOf<'435' | '530' | 'osrs'>();
    // A default derived from another option (the profile's build) is always there too.
    expectTypeOf<Parameters<typeof js5Server.start>[0]['build']>().toEqualTypeOf<number>();
    expectTypeOf<Parameters<typeof unityRelayServer.start>[0]['role']>().toEqualTypeOf<
      'allocator' | 'relay' | 'all'
    >();
  });

  it('the declarations become the ServeOption list, in order, keyed by property', () => {
    expect(server.options.map((o) => o.key)).toEqual(Object.keys(declarations));
    expect(serveOptions(declarations)[0]).toMatchObject({ key: 'count', type: 'int', default: 3, min: 1 });
    expect(server.options.find((o) => o.key === 'on')).toMatchObject({ type: 'bool', default: false });
  });

  it('completeOptions fills every default, converts, and keeps what is given', () => {
    const o = completeOptions('fixture', server, { port: 0, limit: 7, tags: ['a'], width: '4' });
    expect(o).toEqual({
      host: '0.0.0.0',
      port: 0,
      count: 3,
      limit: 7,
      mode: 'safe',
      name: undefined,
      on: false,
      tags: [{ tag: 'a' }],
      width: 4,
      store: undefined,
      prefix: 'x:',
    });
    expect(completeOptions('fixture', server).port).toBe(1000);
  });

  it('completeOptions refuses what the config file would: unknown keys, bad values, a missing requirement', () => {
    expect(() => completeOptions('fixture', server, { cuont: 1 })).toThrow(ConfigError);
    expect(() => completeOptions('fixture', server, { cuont: 1 })).toThrow(/unknown option "cuont".*count/);
    expect(() => completeOptions('fixture', server, { count: 0 })).toThrow(/fixture\.count/);
    expect(() => completeOptions('fixture', server, { mode: 'slow' })).toThrow(/fixture\.mode/);
    expect(() => completeOptions('fixture', server, { prefix: 'y:' })).toThrow(
      /fixture: --prefix \(config fixture\.prefix\) needs --store \(config fixture\.store\)/,
    );
    expect(completeOptions('fixture', server, { prefix: 'y:', store: 'redis://h' }).prefix).toBe('y:');
  });

  it('each protocol’s server gets every default filled (js5, nox-relay, unity-relay)', () => {
    const j = completeOptions('js5', js5Server, { port: 0 });
    expect(j).toMatchObject({
      profile: '530',
      maxClients: 1000,
      sliceBytes: 16384,
      preload: false,
      missingGroup: 'drop',
    });
    expect(j).toMatchObject({ build: 530, masterIndex: 'versioned', maxPerIp: 250 });
    const n = completeOptions('nox-relay', noxRelay.server!, {}) as Record<string, unknown>;
    expect(n).toMatchObject({
      port: 23032,
      maxPacketBytes: 1024,
      connectionTimeoutSeconds: 15,
      maxClients: 4096,
    });
    expect(() => completeOptions('js5', js5Server, { preloadMaxMb: 10 })).toThrow(/needs --preload/);
    expect(completeOptions('js5', js5Server, { preloadMaxMb: 10, preload: true })).toMatchObject({
      preloadMaxMb: 10,
    });
    const u = completeOptions('unity-relay', unityRelayServer, { port: 0 });
    expect(u).toMatchObject({ role: 'all', workers: 0, dataplane: 'auto', apiHost: '127.0.0.1' });
  });

  it('rmc: datacenters as the config file gives them (objects) or a flag (id=host:port) reach start() converted', () => {
    const fromFile = completeOptions('rmc', rmcServer, {
      datacenters: [{ id: 'eu', host: 'eu.example', port: 9103 }, 'us=us.example:9104'],
    });
    expect(fromFile.datacenters).toEqual([
      { id: 'eu', name: 'eu', region: 'eu', host: 'eu.example', port: 9103 },
      { id: 'us', name: 'us', region: 'us', host: 'us.example', port: 9104 },
    ]);
    expectTypeOf(fromFile.datacenters).toEqualTypeOf<
      { id: string; name: string; region: string; host: string; port: number }[] | undefined
    >();
    expect(() => completeOptions('rmc', rmcServer, { datacenters: ['nope'] })).toThrow(
      /rmc\.datacenters.*expected id=host:port/,
    );
    expect(completeOptions('rmc', rmcServer, { prudpChecksum: '4' }).prudpChecksum).toBe(4);
    expect(completeOptions('rmc', rmcServer).prudpChecksum).toBe('auto');
    expect(() => completeOptions('rmc', rmcServer, { role: 'auth' })).toThrow(
      /--role \(config rmc\.role\) needs --redis/,
    );
  });
});
