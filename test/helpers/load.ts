/** Runs a protocol's load generator in this process, reached the way the CLI reaches it: the registry. */
import {
  type LoadProgress,
  type LoadSettings,
  type LoadSummary,
  runLoad,
  TargetPolicy,
  withLoadDefaults,
} from '../../src/core/load/index.js';
import { registry } from '../../src/protocols/registry.js';

export async function runProtocolLoad(
  protocol: string,
  settings: Partial<LoadSettings>,
  options: Record<string, unknown> = {},
  run: {
    owned?: boolean;
    graceMs?: number;
    signal?: AbortSignal;
    /** Ends the run early once this holds (checked every 200 ms): a test need not wait out its duration. */
    stopWhen?: (p: LoadProgress) => boolean;
  } = {},
): Promise<LoadSummary> {
  const entry = registry.find((p) => p.name === protocol);
  const loader = (await entry?.load())?.load;
  if (loader === undefined) throw new Error(`${protocol} has no load generator`);
  const def = await loader();
  const stop = new AbortController();
  run.signal?.addEventListener('abort', () => stop.abort(), { once: true });
  return runLoad({
    definition: def,
    settings: {
      target: settings.target,
      clients: settings.clients ?? 4,
      arrivalRate: settings.arrivalRate ?? 0,
      durationS: settings.durationS ?? 3,
      churnS: settings.churnS ?? 0,
      from: settings.from ?? [],
    },
    options: withLoadDefaults(def, options),
    policy: new TargetPolicy({ owned: run.owned ?? false }),
    ...(run.graceMs === undefined ? {} : { graceMs: run.graceMs }),
    signal: stop.signal,
    ...(run.stopWhen === undefined
      ? {}
      : {
          progressIntervalMs: 200,
          onProgress: (p: LoadProgress) => {
            if (run.stopWhen?.(p) === true) stop.abort();
          },
        }),
  });
}
