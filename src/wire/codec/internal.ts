/** Helpers shared by the codec modules; not part of the public API. */
import { EncodeError, ErrorCode } from '../errors.js';

export type Simplify<T> = { [K in keyof T]: T[K] } & {};

export function typeOf(j: unknown): string {
  return j === null ? 'null' : Array.isArray(j) ? 'array' : typeof j;
}

export function badInput(path: string, detail: string): EncodeError {
  return new EncodeError(ErrorCode.BAD_INPUT, detail, path);
}
