/**
 * Runs in every test file's worker before the file. Test files share their workers (vitest's
 * `isolate: false`, for speed: the modules one file loaded serve the next), so what a file changes
 * in the process must not reach the next one. Environment variables are the change that has
 * happened: a file that leaves one set, changed or removed fails here, and the variable is put
 * back so the next file starts clean.
 */
import { afterAll } from 'vitest';

const before = { ...process.env };

afterAll(() => {
  const changed: string[] = [];
  for (const [name, value] of Object.entries(process.env)) {
    if (before[name] !== value) {
      changed.push(name);
      if (before[name] === undefined) delete process.env[name];
      else process.env[name] = before[name];
    }
  }
  for (const [name, value] of Object.entries(before)) {
    if (!(name in process.env)) {
      changed.push(name);
      process.env[name] = value;
    }
  }
  if (changed.length > 0)
    throw new Error(`this file left environment variables changed for the next file: ${changed.join(', ')}`);
});
