/**
 * Lenient reading: a model of the real plugin's reader (stdrpc's `ReadBuffer` and
 * `CallFunctionAdvanced`; the server plugin has a copy of them). That reader builds no tree: it
 * pushes values onto the Squirrel stack and lets the stack decide what belongs to what. For well
 * formed bytes the result is the obvious tree; for malformed ones, what the plugin does follows
 * from its stack, so this reader keeps a model of that stack and replays the plugin's operations:
 *
 * - a call pushes its function (F at once; G/D once the callee item has run; E after its first
 *   argument), then `this` (the root table, F/G), then whatever each value it reads pushes, and
 *   counts every value it reads as a parameter. At its end it calls the slot `count + 1` below
 *   the top, with the `count` slots above it as parameters (the first is `this`);
 * - an array pushes itself, then after each element calls `arrayappend(-2)`: the top slot goes
 *   into the slot below when that is an array (Squirrel refuses otherwise, and the plugin goes on);
 * - an array whose length runs past its container pushes nothing, and the reader goes on after
 *   its 5-byte header. So inside an array the append that follows moves the array being read into
 *   the slot below (when that is an array), and the following elements go to that one; as a
 *   parameter it is counted without a slot, so the call reaches one slot too low;
 * - an E whose first argument pushed nothing looks its name up on whatever slot is on top, and
 *   takes that slot as its `this`.
 *
 * Two ways to run the model:
 * - static (decoding): values are nodes, and a call becomes a node. Whatever the plugin does that
 *   a tree cannot say fails the packet with a typed error: a call that reaches a slot other than
 *   its own function (a table or value: "attempt to call"; a function of an enclosing call, with
 *   the plugin's own slots as parameters; a slot below the packet's part of the stack, read out of
 *   bounds), a step that depends on what a nested call returned (an append onto its result), an E
 *   whose `this` would be the root table or a function;
 * - live (`LiveHooks`, the executor's streaming mode): values are JavaScript values and each call
 *   runs as soon as it is read, like the plugin. The stack is followed whatever it holds; only a
 *   slot below the packet's own part of the stack fails the packet (the plugin reads out of
 *   bounds there and crashes).
 */
import { DecodeError, ErrorCode, type WireReader } from '../../wire/index.js';
import {
  type IndirectCall,
  isKnownTag,
  type NamedCall,
  type RpcCall,
  type RpcValue,
  Tag,
  type TopItem,
  tagName,
} from './values.js';

/** How strictly to read, and in which direction the packet travels. */
export interface ReadMode {
  /** Read as the real plugin does (this file) instead of rejecting anything malformed (read.ts). */
  lenient: boolean;
  /**
   * `server` (server→NPC): no `g`/`h`. `client` (NPC→server): `g` values and a top-level `h`
   * are allowed. `any`: accept both.
   */
  direction: 'server' | 'client' | 'any';
}

/**
 * What a live run needs from the executor. Each hook throws to fail the packet, as the plugin
 * fails it at that point.
 */
export interface LiveHooks {
  /** The root table (`this` of F and G). */
  readonly root: unknown;
  /** A scalar value as the script sees it. */
  scalar(node: RpcValue): unknown;
  /** F, before its arguments: the slot named on the root table. */
  rootSlot(name: string): unknown;
  /** E, after its first argument: the slot named on `self`. */
  method(self: unknown, name: string): unknown;
  /** G/D, after the callee item: what it returned must be a function. */
  callee(value: unknown): void;
  /** The call: `fn` with `params[0]` as `this` and the rest as arguments. */
  call(fn: unknown, params: unknown[], call: RpcCall): unknown;
  /**
   * E/D that read no parameter: the plugin calls the top slot (E: whatever is there; D: its
   * function) with none, which fails.
   */
  noParameters(top: unknown): never;
  /** `g`: a lookup path. */
  get(path: unknown[]): unknown;
  /** `h`: a set. */
  set(values: unknown[]): void;
}

/** An open call, set (`h`) or lookup (`g`) while its body is read. */
interface Frame {
  /** Static: the node being built. Live: the call (name and tag) for messages. */
  node: RpcCall;
  /** Offset of the item's tag. */
  at: number;
  /** Index of its function slot once pushed (F at once; G/D after the callee; E after its first parameter). */
  fnIndex: number;
}

/**
 * One slot of the modelled Squirrel stack. `v` is a node (static) or a JavaScript value (live);
 * `frame` marks the function slot of a call.
 */
interface Slot {
  kind: 'root' | 'function' | 'value';
  v: unknown;
  frame?: Frame;
}

class PluginModel {
  private readonly stack: Slot[] = [];
  /** Offsets of arrays that pushed nothing, to point errors at them. */
  private readonly unpushed: number[] = [];
  private readonly r: WireReader;
  private readonly mode: ReadMode;
  private readonly live: LiveHooks | undefined;

  constructor(r: WireReader, mode: ReadMode, live?: LiveHooks) {
    this.r = r;
    this.mode = mode;
    this.live = live;
  }

  /** The top-level item (its tag already read at `at`): a call or, NPC→server, a set. */
  top(tag: number, at: number): unknown {
    const r = this.r;
    if (tag === Tag.h) {
      if (this.mode.direction === 'server')
        throw new DecodeError(ErrorCode.UNKNOWN_TYPE, "item 'h' only travels NPC→server", at);
      const values = this.sized('set');
      if (this.live !== undefined) {
        this.live.set(values);
        return undefined;
      }
      return { type: 'set', values };
    }
    const size = r.u32be();
    // `funcStreamLen + 5 > size` in 32 bits, `size` counting from the tag to the packet end: the
    // declared size is only an upper bound (it wraps from 0xfffffffb), the arguments run to the end.
    if ((size + 5) >>> 0 > r.remaining + 5) r.fail(size, 'call item');
    this.call(tag, at);
    return this.stack.pop()!.v;
  }

  /** One value on its own (the public `readValue`): it must push exactly one slot. */
  single(): RpcValue {
    const at = this.r.offset;
    this.value();
    if (this.stack.length !== 1) throw this.countError(at, 'nothing');
    return this.stack.pop()!.v as RpcValue;
  }

  // ---- the stack -----------------------------------------------------------------------------

  private push(v: unknown): void {
    this.stack.push({ kind: 'value', v });
  }

  /** What a slot holds, for a live run: the root table, a function, or a value. */
  private valueOf(slot: Slot): unknown {
    return slot.kind === 'root' ? this.live!.root : slot.v;
  }

  /** `sq_arrayappend(v, -2)`: the top slot goes into the slot below it, if that is an array. */
  private arrayAppend(elementAt: number): void {
    const s = this.stack;
    const n = s.length;
    // Squirrel checks that two slots exist and refuses otherwise (the packet's part of the stack
    // starts at its bottom: the plugin is called with an empty stack); the plugin goes on.
    if (n < 2) return;
    const target = s[n - 2]!;
    if (this.live !== undefined) {
      const into = this.valueOf(target);
      if (Array.isArray(into)) into.push(this.valueOf(s.pop()!));
      return;
    }
    if (target.kind !== 'value') return; // the root table or a function: Squirrel refuses, the plugin goes on
    const node = target.v as RpcValue;
    if (node.type === 'array') {
      node.items.push(s.pop()!.v as RpcValue);
    } else if (node.type === 'call' || node.type === 'get') {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `an array element pushed nothing, so the plugin appends to the slot below, the result of a ${node.type === 'call' ? 'nested call' : 'lookup'}: what happens depends on what that returns (the executor's streaming mode follows it); gamewire fails the packet`,
        elementAt,
      );
    }
    // Any other value is not an array: Squirrel refuses, the plugin goes on.
  }

  // ---- values (ReadBuffer) -------------------------------------------------------------------

  /** Reads one value and pushes what the plugin pushes (an overrunning array pushes nothing). */
  private value(): void {
    const r = this.r;
    const at = r.offset;
    const tag = r.u8();
    switch (tag) {
      case Tag.a:
        this.array(at);
        return;
      case Tag.F:
      case Tag.G:
      case Tag.E:
      case Tag.D:
        this.nestedCall(tag, at);
        return;
      case Tag.g: {
        if (this.mode.direction === 'server')
          throw new DecodeError(ErrorCode.UNKNOWN_TYPE, "item 'g' only travels NPC→server", at);
        const path = this.sized('get');
        this.push(this.live !== undefined ? this.live.get(path) : { type: 'get', path });
        return;
      }
      default: {
        const node = scalar(r, tag, at);
        this.push(this.live !== undefined ? this.live.scalar(node) : node);
      }
    }
  }

  private array(at: number): void {
    const r = this.r;
    // The C++ keeps the u32 length in a uint16_t.
    const n = r.u32be() & 0xffff;
    if (n > r.remaining) {
      // Checked against the enclosing call item: the plugin pushes nothing and reads on.
      this.unpushed.push(at);
      return;
    }
    r.enter();
    this.push(this.live !== undefined ? [] : { type: 'array', items: [] });
    // Elements are bounded by the enclosing call item, not by the array's own end.
    const stop = r.offset + n;
    while (r.offset < stop) {
      const elementAt = r.offset;
      this.value();
      this.arrayAppend(elementAt);
    }
    r.leave();
  }

  /** A call used as a value: bounded by its size cut to 16 bits, which it then re-reads in full. */
  private nestedCall(tag: number, at: number): void {
    const r = this.r;
    const size = r.u32be();
    const bound = size & 0xffff;
    if (bound > r.remaining) r.fail(bound, 'call item');
    if ((size + 5) >>> 0 > bound + 5) {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `a nested call size of ${size} (≥ 65536) fails: the real plugin bounds the item with the size cut to 16 bits, then re-reads the full size`,
        at,
      );
    }
    r.enter();
    const previous = r.limit(bound, `call item at ${at}`);
    this.call(tag, at);
    r.restore(previous);
    r.leave();
  }

  // ---- calls (CallFunctionAdvanced) ----------------------------------------------------------

  /** Reads a call's body up to the current bound, then calls it: its result replaces its slots. */
  private call(tag: number, at: number): void {
    const r = this.r;
    const s = this.stack;
    const live = this.live;
    const node: RpcCall =
      tag === Tag.F || tag === Tag.E
        ? { type: 'call', tag: tag === Tag.F ? 'F' : 'E', name: '', args: [] }
        : { type: 'call', tag: tag === Tag.G ? 'G' : 'D', callee: { type: 'null' }, args: [] };
    const frame: Frame = { node, at, fnIndex: -1 };
    let count = 0;
    if (node.tag === 'F' || node.tag === 'E') {
      node.name = r.string(r.u16be(), 'utf8', true);
      if (node.tag === 'F') {
        frame.fnIndex = s.length;
        s.push({ kind: 'function', v: live?.rootSlot(node.name), frame }, { kind: 'root', v: undefined });
        count = 1;
      }
    } else {
      const calleeAt = r.offset;
      const start = s.length;
      this.value();
      const top = s[s.length - 1];
      if (live !== undefined) {
        // Whatever is on top now is taken as the function, even a slot from below this call.
        if (top === undefined) throw belowStack(calleeAt, 'the callee pushed nothing');
        live.callee(this.valueOf(top));
      } else if (s.length !== start + 1 || top?.kind !== 'value') {
        throw new DecodeError(
          ErrorCode.BAD_VALUE,
          `the callee of a ${node.tag} call pushed nothing: the plugin would take the slot below it as the function; gamewire fails the packet`,
          calleeAt,
        );
      }
      (node as IndirectCall).callee = top.v as RpcValue;
      frame.fnIndex = s.length - 1;
      s[frame.fnIndex] = { kind: 'function', v: this.valueOf(top), frame };
      if (node.tag === 'G') {
        s.push({ kind: 'root', v: undefined });
        count = 1;
      }
    }
    while (r.offset < r.end) {
      const argAt = r.offset;
      this.value();
      if (count === 0 && node.tag === 'E') this.environment(frame, node, argAt);
      count++;
    }
    if (count === 0) {
      // E or D without parameters: the plugin calls the top slot with none, which fails.
      if (live !== undefined) {
        const top = s[s.length - 1];
        if (top === undefined)
          throw belowStack(at, `an ${node.tag} call without parameters calls the top slot`);
        live.noParameters(this.valueOf(top));
      }
      if (frame.fnIndex >= 0) s.length = frame.fnIndex;
      this.push(node);
      return;
    }
    const fnIndex = s.length - count - 1;
    if (fnIndex < 0)
      throw this.countError(at, "a slot below the packet's part of the Squirrel stack (out of bounds)");
    const fnSlot = s[fnIndex]!;
    let result: unknown;
    if (live !== undefined) {
      const params: unknown[] = [];
      for (let i = fnIndex + 1; i < s.length; i++) params.push(this.valueOf(s[i]!));
      result = live.call(this.valueOf(fnSlot), params, node);
    } else {
      if (fnSlot.frame !== frame) throw this.countError(at, callsWhat(fnSlot));
      for (let i = fnIndex + (node.tag === 'F' || node.tag === 'G' ? 2 : 1); i < s.length; i++) {
        node.args.push(s[i]!.v as RpcValue);
      }
      result = node;
    }
    s.length = fnIndex;
    this.push(result);
  }

  /** E, after its first parameter: the name is looked up on the top slot, which becomes `this`. */
  private environment(frame: Frame, node: RpcCall, argAt: number): void {
    const s = this.stack;
    const n = s.length;
    const self = n > 0 ? s[n - 1] : undefined;
    const name = (node as NamedCall).name;
    if (self === undefined) throw belowStack(argAt, `the first parameter of E '${name}' pushed nothing`);
    let fn: unknown;
    if (this.live !== undefined) {
      fn = this.live.method(this.valueOf(self), name);
    } else if (self.kind !== 'value') {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `the first parameter of E '${name}' pushed nothing, so the plugin looks the name up on ${self.kind === 'root' ? 'its root table' : 'a function'}; gamewire fails the packet`,
        argAt,
      );
    }
    // The function slides under its `this`.
    s.splice(n - 1, 0, { kind: 'function', v: fn, frame });
    frame.fnIndex = n - 1;
  }

  /** `g` and `h`: `u32 BE size`, then values, each of which must push exactly one slot. */
  private sized(what: 'get' | 'set'): unknown[] {
    const r = this.r;
    const s = this.stack;
    const n = r.u32be();
    r.enter();
    const previous = r.limit(n, what);
    const start = s.length;
    while (r.offset < r.end) {
      const valueAt = r.offset;
      const before = s.length;
      this.value();
      if (s.length !== before + 1) throw this.countError(valueAt, `the ${what}'s next value`);
    }
    const values = s.splice(start).map((slot) => (this.live !== undefined ? this.valueOf(slot) : slot.v));
    r.restore(previous);
    r.leave();
    return values;
  }

  private countError(at: number, reaches: string): DecodeError {
    const blame = this.unpushed.find((offset) => offset >= at);
    return new DecodeError(
      ErrorCode.BAD_LENGTH,
      `an array's length runs past its container: the real plugin pushes nothing for it but counts it, so the call reaches ${reaches}; gamewire fails the packet`,
      blame ?? at,
    );
  }
}

function belowStack(at: number, what: string): DecodeError {
  return new DecodeError(
    ErrorCode.BAD_LENGTH,
    `${what}, so the plugin reaches below the packet's part of the Squirrel stack (out of bounds); gamewire fails the packet`,
    at,
  );
}

/** What a call whose count is off reaches instead of its own function. */
function callsWhat(slot: Slot): string {
  if (slot.kind === 'root') return 'the root table ("attempt to call \'table\'")';
  if (slot.kind === 'function')
    return "the function of an enclosing call, with the plugin's own slots as parameters";
  const type = (slot.v as RpcValue).type;
  if (type === 'call' || type === 'get')
    return "a nested call's result (the executor's streaming mode follows it)";
  return `a value ("attempt to call '${type}'")`;
}

/** The values that are neither arrays nor items: each pushes exactly one slot. */
function scalar(r: WireReader, tag: number, at: number): RpcValue {
  switch (tag) {
    case Tag.o:
      return { type: 'null' };
    case Tag.i:
      return { type: 'int', value: r.i32le() };
    case Tag.f:
      return { type: 'float', value: r.f32le() };
    case Tag.b:
      return { type: 'bool', value: r.bool() };
    case Tag.s:
      return { type: 'string', value: r.string(r.u16be(), 'utf8', true) };
    case Tag.v:
      return { type: 'vector', x: r.f32le(), y: r.f32le(), z: r.f32le() };
    case Tag.q:
      return { type: 'quaternion', x: r.f32le(), y: r.f32le(), z: r.f32le(), w: r.f32le() };
    default:
      throw new DecodeError(ErrorCode.UNKNOWN_TYPE, `unknown item tag ${tagName(tag)}`, at);
  }
}

function checkTopTag(tag: number, at: number): void {
  if (tag === Tag.F || tag === Tag.G || tag === Tag.E || tag === Tag.D || tag === Tag.h) return;
  if (isKnownTag(tag)) {
    throw new DecodeError(ErrorCode.BAD_VALUE, `a ServerData must hold a call item, not ${tagName(tag)}`, at);
  }
  throw new DecodeError(ErrorCode.UNKNOWN_TYPE, `unknown item tag ${tagName(tag)}`, at);
}

/** Reads the top-level item leniently (its tag already read at `at`). */
export function readTopLenient(r: WireReader, mode: ReadMode, tag: number, at: number): TopItem {
  checkTopTag(tag, at);
  return new PluginModel(r, mode).top(tag, at) as TopItem;
}

/** Reads one value leniently, on its own stack: a value that pushes nothing is an error. */
export function readValueLenient(r: WireReader, mode: ReadMode): RpcValue {
  return new PluginModel(r, mode).single();
}

/**
 * Runs the top-level item while reading it, as the plugin does (its tag already read at `at`):
 * the calls before a failure have run when it is thrown. Returns what the top-level call returned.
 */
export function runTopLive(
  r: WireReader,
  mode: ReadMode,
  tag: number,
  at: number,
  hooks: LiveHooks,
): unknown {
  checkTopTag(tag, at);
  return new PluginModel(r, mode, hooks).top(tag, at);
}
