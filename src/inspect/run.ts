/** Runs the whole pipeline over a byte source (a file, stdin, a buffer). */
import { type CaptureLimits, CaptureParser } from './capture.js';
import { type InspectOptions, Inspector, type InspectRecord, type InspectStats } from './inspector.js';
import { loadFlowProtocols } from './protocols.js';

export interface RunOptions extends Partial<InspectOptions> {
  capture?: Partial<CaptureLimits>;
}

/** Decodes a capture arriving in chunks; records are handed out as soon as they are complete. */
export async function inspectChunks(
  chunks: AsyncIterable<Buffer> | Iterable<Buffer>,
  onRecord: (r: InspectRecord) => void,
  options: RunOptions = {},
): Promise<InspectStats> {
  const inspector = new Inspector(onRecord, {
    ...options,
    protocols: options.protocols ?? (await loadFlowProtocols()),
  });
  const parser = new CaptureParser((p) => inspector.packet(p), options.capture);
  for await (const chunk of chunks) parser.push(chunk);
  parser.end();
  inspector.finish();
  return inspector.stats;
}

/**
 * Decodes a whole capture held in memory, synchronously: `options.protocols` comes from
 * `await loadFlowProtocols()` (without it no flow is decoded).
 */
export function inspectBuffer(
  bytes: Buffer,
  onRecord: (r: InspectRecord) => void,
  options: RunOptions = {},
): InspectStats {
  const inspector = new Inspector(onRecord, options);
  const parser = new CaptureParser((p) => inspector.packet(p), options.capture);
  parser.push(bytes);
  parser.end();
  inspector.finish();
  return inspector.stats;
}
