/** `gamewire load`'s protocol-free part: the generator contract, the runner, measures and the target rule. */
export { codeOf, parseIdList, pause, untilStopped } from './helpers.js';
export { Histogram, type LatencySummary } from './histogram.js';
export { type LoadProgress, type LoadSummary, type RunLoadOptions, runLoad } from './run.js';
export { SequenceTracker } from './sequence.js';
export { Counter, Latency, type LoadSnapshot, LoadStats, type SessionCounts } from './stats.js';
export {
  checkLocalAddresses,
  isLoopbackAddress,
  OWN_TARGET_FLAG,
  parseFromAddresses,
  parseHostPort,
  TargetPolicy,
} from './target.js';
export {
  type LoadClient,
  type LoadDefinition,
  type LoadGenerator,
  type LoadOption,
  type LoadRun,
  type LoadSettings,
  LoadUnfinished,
  type StopReason,
  withLoadDefaults,
} from './types.js';
