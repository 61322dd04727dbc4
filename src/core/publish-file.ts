/**
 * Creating a state file in a data folder when several processes may do it at once (two `serve`
 * processes started together on one folder, an auth and a secure process sharing a key): the
 * first to publish wins, and every process, winner or not, goes on with the winner's content.
 *
 * "Exists? no: write it" lets two processes each write their own content into the same path (each
 * keeps a different one in memory) and lets a reader see a half-written file. Here the content is
 * written whole to a temp file beside the target, then hard-linked to the target name: `link`
 * fails with EEXIST when the name is taken, so exactly one process creates it, and the file it
 * publishes is already complete. A loser reads what is there.
 *
 * Where the file system refuses hard links (some network, FAT and FUSE file systems), the fallback
 * creates the target exclusively (`wx`) and writes into it: still exactly one creator, but a
 * process reading it at that moment may see it empty or short. Callers that parse the content
 * should treat such a read like an invalid file.
 */
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  linkSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { link, open, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface PublishOptions {
  /** Permission bits of a created file (0o600 for keys); default 0o644. */
  mode?: number;
}

export interface Published {
  /** What the path holds afterwards: this call's content if it created the file, else the existing one. */
  data: Buffer;
  /** This call created the file. */
  created: boolean;
}

/** Errors of `link` that mean "this file system has no hard links", not "the name is taken". */
const NO_HARD_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'EXDEV', 'ENOSYS']);

const codeOf = (err: unknown): string | undefined => (err as NodeJS.ErrnoException | null)?.code;

/** A temp name beside `file`, unique across processes (pid) and calls within one (random). */
function tempName(file: string): string {
  return path.join(
    path.dirname(file),
    `.${path.basename(file)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`,
  );
}

/**
 * Publishes `data` at `file` unless something is there already (see the module comment). The
 * folder must exist. Throws what the file system throws otherwise.
 */
export function publishFileSync(
  file: string,
  data: string | Uint8Array,
  options: PublishOptions = {},
): Published {
  const content = Buffer.from(data);
  const mode = options.mode ?? 0o644;
  const tmp = tempName(file);
  let linked: boolean | undefined;
  try {
    const fd = openSync(tmp, 'wx', mode);
    try {
      writeSync(fd, content);
      // On disk before it has a name, so a crash never leaves a published empty key behind.
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(tmp, file);
      linked = true;
    } catch (err) {
      if (codeOf(err) === 'EEXIST') linked = false;
      else if (!NO_HARD_LINKS.has(codeOf(err) ?? '')) throw err;
    }
  } finally {
    rmSync(tmp, { force: true });
  }
  if (linked === true) return { data: content, created: true };
  if (linked === false) return { data: readFileSync(file), created: false };
  try {
    writeFileSync(file, content, { flag: 'wx', mode });
    return { data: content, created: true };
  } catch (err) {
    if (codeOf(err) !== 'EEXIST') throw err;
    return { data: readFileSync(file), created: false };
  }
}

/** `publishFileSync` without blocking the event loop. */
export async function publishFile(
  file: string,
  data: string | Uint8Array,
  options: PublishOptions = {},
): Promise<Published> {
  const content = Buffer.from(data);
  const mode = options.mode ?? 0o644;
  const tmp = tempName(file);
  let linked: boolean | undefined;
  try {
    const fh = await open(tmp, 'wx', mode);
    try {
      await fh.writeFile(content);
      await fh.sync();
    } finally {
      await fh.close();
    }
    try {
      await link(tmp, file);
      linked = true;
    } catch (err) {
      if (codeOf(err) === 'EEXIST') linked = false;
      else if (!NO_HARD_LINKS.has(codeOf(err) ?? '')) throw err;
    }
  } finally {
    await rm(tmp, { force: true });
  }
  if (linked === true) return { data: content, created: true };
  if (linked === false) return { data: await readFile(file), created: false };
  try {
    await writeFile(file, content, { flag: 'wx', mode });
    return { data: content, created: true };
  } catch (err) {
    if (codeOf(err) !== 'EEXIST') throw err;
    return { data: await readFile(file), created: false };
  }
}
