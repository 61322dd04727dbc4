/**
 * `--redis` values: one Redis or a Sentinel set (`redis+sentinel://`), gamewire's durability
 * parameters, passwords kept out of messages, and the one-line start-up failure.
 */
import { describe, expect, it } from 'vitest';
import { connectRedis, parseRedisUrl, redactRedisUrl } from '../../src/core/redis.js';

describe('--redis URLs', () => {
  it('a plain URL waits for no replica unless asked; the parameters are gamewire’s, not passed on', () => {
    expect(parseRedisUrl('redis://127.0.0.1:6379/2')).toEqual({
      mode: 'single',
      url: 'redis://127.0.0.1:6379/2',
      durability: { replicas: 0, timeoutMs: 500 },
    });
    const t = parseRedisUrl('rediss://:pw@h:6380?waitReplicas=1&waitTimeoutMs=250');
    expect(t.durability).toEqual({ replicas: 1, timeoutMs: 250 });
    expect(t.url).toBe('rediss://:pw@h:6380');
  });

  it('a Sentinel set: hosts (26379 by default), primary name, credentials, db, TLS; waits for one replica by default', () => {
    expect(
      parseRedisUrl(
        'redis+sentinel://app:s%40cret@10.0.0.1:26379,10.0.0.2,[::1]:26380/mymaster?db=3&sentinelPassword=sp&tls=true',
      ),
    ).toEqual({
      mode: 'sentinel',
      name: 'mymaster',
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: '10.0.0.2', port: 26379 },
        { host: '::1', port: 26380 },
      ],
      username: 'app',
      password: 's@cret',
      db: 3,
      tls: true,
      sentinelPassword: 'sp',
      durability: { replicas: 1, timeoutMs: 500 },
    });
    expect(parseRedisUrl('redis+sentinel://h/m/4?waitReplicas=0').durability.replicas).toBe(0);
    expect(parseRedisUrl('redis+sentinel://h/m/4').db).toBe(4);
    expect(parseRedisUrl('rediss+sentinel://h/m').tls).toBe(true);
  });

  it('refuses what it cannot use, naming the flag, the password hidden', () => {
    expect(() => parseRedisUrl('http://h', '--redis')).toThrow(
      /--redis http:\/\/h\/?: expected a redis:\/\//,
    );
    expect(() => parseRedisUrl('redis+sentinel://:pw@h1,h2')).toThrow(/<primary name>/);
    expect(() => parseRedisUrl('redis+sentinel://:pw@h1/m?waitReplica=1')).toThrow(
      /redis\+sentinel:\/\/:\*\*\*@h1\/m\?waitReplica=1: unknown parameter waitReplica/,
    );
    expect(() => parseRedisUrl('redis+sentinel://h1:99999/m')).toThrow(/port must be an integer/);
    expect(() => parseRedisUrl('redis://h?waitReplicas=-1')).toThrow(/waitReplicas must be an integer/);
  });

  it('redacts every password', () => {
    expect(redactRedisUrl('redis+sentinel://u:pw@h1,h2/m?sentinelPassword=sp&db=1')).toBe(
      'redis+sentinel://u:***@h1,h2/m?sentinelPassword=***&db=1',
    );
    expect(redactRedisUrl('redis+sentinel://pw@h1/m')).toBe('redis+sentinel://***@h1/m');
    expect(redactRedisUrl('redis://:pw@h:1')).toBe('redis://:***@h:1');
  });

  it('no sentinel answering: start-up fails with one line naming the URL (password hidden) and the flag', async () => {
    const err = await connectRedis('redis+sentinel://:pw@127.0.0.1:1/mymaster', {
      connectTimeoutMs: 400,
      flag: '--redis (config unity-relay.redis)',
    }).catch((e: unknown) => e as Error & { code: string });
    expect(err).toBeInstanceOf(Error);
    expect((err as { code: string }).code).toBe('ERR_REDIS');
    expect((err as Error).message).toMatch(
      /^no Redis primary "mymaster" from the sentinels of redis\+sentinel:\/\/:\*\*\*@127\.0\.0\.1:1\/mymaster .*--redis \(config unity-relay\.redis\)$/,
    );
    expect((err as Error).message).not.toContain('pw');
    expect((err as Error).message).not.toContain('\n');
  });
});
