/**
 * LogDestination: the logger's path to stderr never blocks, never grows past its backlog cap when
 * nobody reads, and drops everything once the stream failed. Streams here are real Node
 * Writables whose reader is slow, stalled or gone.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { LogDestination } from '../../src/core/log-destination.js';

/** A stream whose reader takes nothing until `release()` (a pipe nobody reads). */
function stalled(): { stream: Writable; taken: string[]; release: () => void } {
  const taken: string[] = [];
  const waiting: (() => void)[] = [];
  let open = false;
  const stream = new Writable({
    highWaterMark: 16,
    write(chunk: Buffer, _enc, cb) {
      taken.push(chunk.toString());
      if (open) cb();
      else waiting.push(cb);
    },
  });
  return {
    stream,
    taken,
    release() {
      open = true;
      for (const cb of waiting.splice(0)) cb();
    },
  };
}

describe('LogDestination', () => {
  it('writes lines through while the reader keeps up (both sides of the cap)', () => {
    const out: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, cb) {
        out.push(chunk.toString());
        cb();
      },
    });
    const d = new LogDestination(stream, { maxBacklogBytes: 100 });
    for (let i = 0; i < 1000; i++) {
      d.write(`line ${i}\n`);
      d.flush(); // a reader that keeps up: nothing stays queued between lines
    }
    expect(out.join('')).toBe(Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join(''));
    expect(d.dropped).toBe(0);
  });

  it('writes the lines of one turn of the event loop together, in order', async () => {
    const writes: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, cb) {
        writes.push(chunk.toString());
        cb();
      },
    });
    const d = new LogDestination(stream);
    for (let i = 0; i < 100; i++) d.write(`${i}\n`);
    expect(writes).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(1);
    expect(writes[0]).toBe(Array.from({ length: 100 }, (_, i) => `${i}\n`).join(''));
  });

  it('lines logged just before process.exit() still reach stderr (a real process)', () => {
    const url = pathToFileURL(path.resolve('src/core/log-destination.ts')).href;
    const r = spawnSync(
      process.execPath,
      [
        '--experimental-strip-types',
        '--no-warnings',
        '--input-type=module',
        '-e',
        `const { LogDestination } = await import(${JSON.stringify(url)});
         const d = new LogDestination(process.stderr);
         d.write('last words\\n');
         process.exit(3);`,
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(r.status, r.stderr).toBe(3);
    expect(r.stderr).toBe('last words\n');
  });

  it('drops lines beyond the backlog cap when nobody reads, then says how many once read again', async () => {
    const s = stalled();
    const d = new LogDestination(s.stream, { maxBacklogBytes: 64 });
    const line = `${'x'.repeat(31)}\n`; // 32 bytes
    for (let i = 0; i < 100; i++) d.write(line);
    d.flush();
    // Queued up to just over the cap (the cap is checked before each line), the rest dropped.
    expect(s.stream.writableLength).toBeLessThanOrEqual(64 + line.length);
    expect(d.dropped).toBeGreaterThanOrEqual(96);
    const dropped = d.dropped;
    s.release();
    await new Promise<void>((resolve) => d.flush(() => resolve()));
    d.write('after\n');
    d.flush();
    const lines = s.taken.join('').split('\n');
    const notice = lines.find((t) => t.includes('were dropped'));
    expect(JSON.parse(notice!)).toMatchObject({
      level: 40,
      dropped,
      msg: `${dropped} log lines were dropped: stderr was not being read`,
    });
    expect(lines.at(-2)).toBe('after');
  });

  it('drops everything after a stream error, and never throws', () => {
    const stream = new Writable({
      write(_chunk, _enc, cb) {
        const err = Object.assign(new Error('write EPIPE'), { code: 'EPIPE' });
        cb(err);
      },
    });
    const d = new LogDestination(stream);
    d.write('first\n');
    d.flush();
    return new Promise<void>((resolve) => {
      stream.once('close', () => {
        expect(d.failed).toBe(true);
        expect(() => d.write('second\n')).not.toThrow();
        expect(d.dropped).toBe(1);
        d.flush(() => resolve()); // calls back at once: nothing waits for a reader that is gone
      });
    });
  });

  it('flush calls back at once when nothing is queued, and after the reader caught up otherwise', async () => {
    const s = stalled();
    const d = new LogDestination(s.stream);
    let flushed = false;
    d.flush(() => {
      flushed = true;
    });
    expect(flushed).toBe(true);
    for (let i = 0; i < 10; i++) d.write('0123456789\n');
    d.flush();
    flushed = false;
    const done = new Promise<void>((resolve) =>
      d.flush(() => {
        flushed = true;
        resolve();
      }),
    );
    expect(flushed).toBe(false);
    s.release();
    await done;
    expect(flushed).toBe(true);
  });

  it('formats each line (pino-pretty on a terminal) on the same path', () => {
    const out: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, cb) {
        out.push(chunk.toString());
        cb();
      },
    });
    const d = new LogDestination(stream, { format: (l) => `> ${l}` });
    d.write('{"msg":"hi"}\n');
    d.flush();
    expect(out).toEqual(['> {"msg":"hi"}\n']);
  });
});
