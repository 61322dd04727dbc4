// Preloaded with `--import` by the module-graph tests: records every module the process
// resolves (ESM imports and CommonJS requires alike) and writes the list to
// $GAMEWIRE_MODULE_LOG when the process exits.
import { writeFileSync } from 'node:fs';
import { registerHooks } from 'node:module';

const seen = new Set();
registerHooks({
  resolve(specifier, context, next) {
    const result = next(specifier, context);
    seen.add(result.url);
    return result;
  },
});
process.on('exit', () => {
  writeFileSync(process.env.GAMEWIRE_MODULE_LOG, [...seen].join('\n'));
});
