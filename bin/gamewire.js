#!/usr/bin/env node
// The compiled CLI (npm ci builds it through the `prepare` script).
import { main } from '../dist/src/cli/main.js';

main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    process.stderr.write(
      `${JSON.stringify({ error: { code: 'ERR_INTERNAL', message: String(err?.message ?? err) } })}\n`,
    );
    process.exitCode = 1;
  },
);
