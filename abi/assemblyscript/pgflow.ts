// The pgflow-wasm guest ABI, version 1 (see abi/SPEC.md), for AssemblyScript.
//
// A handler is one function from the step input and the context (JSON bytes, UTF-8) to a
// Result: the output JSON or an error message. The entry file exports pgflow_handle around
// it and re-exports pgflow_abi_version:
//
//   import { Result, run } from "<path to>/abi/assemblyscript";
//   export { pgflow_abi_version } from "<path to>/abi/assemblyscript";
//
//   function hello(input: Uint8Array, context: Uint8Array): Result {
//     return Result.ok('{"hello":"world"}');
//   }
//
//   export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
//     return run(inputLen, contextLen, hello);
//   }
//
// Build with --use abort=<path to>/abi/assemblyscript/pgflow/pgflowAbort so that an abort
// (a failed assertion, a throw, running out of memory) reports its message through
// error_write and traps, instead of importing env.abort.

// @ts-ignore: decorator
@external("pgflow", "input_read")
declare function input_read(ptr: usize): void;
// @ts-ignore: decorator
@external("pgflow", "context_read")
declare function context_read(ptr: usize): void;
// @ts-ignore: decorator
@external("pgflow", "output_write")
declare function output_write(ptr: usize, len: usize): void;
// @ts-ignore: decorator
@external("pgflow", "error_write")
declare function error_write(ptr: usize, len: usize): void;
// @ts-ignore: decorator
@external("pgflow", "log")
declare function host_log(level: i32, ptr: usize, len: usize): void;

export const ABI_VERSION: i32 = 1;

/** Values pgflow_handle returns. */
export const STATUS_OK: i32 = 0;
export const STATUS_HANDLER_ERROR: i32 = 1;

export enum Level {
  Debug = 0,
  Info = 1,
  Warn = 2,
  Error = 3,
}

/** What a handler returns: output JSON (UTF-8) or an error message. */
export class Result {
  output: Uint8Array | null;
  error: string | null;

  constructor(output: Uint8Array | null, error: string | null) {
    this.output = output;
    this.error = error;
  }

  /** Success with output JSON given as a string. */
  static ok(json: string): Result {
    return new Result(Uint8Array.wrap(String.UTF8.encode(json)), null);
  }

  /** Success with output JSON given as UTF-8 bytes (e.g. from json.Writer). */
  static okBytes(json: Uint8Array): Result {
    return new Result(json, null);
  }

  /** Failure: the task fails with message. */
  static err(message: string): Result {
    return new Result(null, message);
  }
}

export type Handler = (input: Uint8Array, context: Uint8Array) => Result;

/** Writes one log line for the current task. */
export function log(level: Level, message: string): void {
  const b = String.UTF8.encode(message);
  host_log(level, changetype<usize>(b), b.byteLength);
}

function writeError(message: string): void {
  const b = String.UTF8.encode(message);
  error_write(changetype<usize>(b), b.byteLength);
}

function fetch(len: i32, isInput: bool): Uint8Array {
  const buf = new Uint8Array(len > 0 ? len : 0);
  if (len > 0) {
    if (isInput) input_read(buf.dataStart);
    else context_read(buf.dataStart);
  }
  return buf;
}

/** The body of pgflow_handle: fetches input and context, runs handler, hands back its result. */
export function run(inputLen: i32, contextLen: i32, handler: Handler): i32 {
  const input = fetch(inputLen, true);
  const context = fetch(contextLen, false);
  const result = handler(input, context);
  const error = result.error;
  if (error !== null) {
    writeError(error);
    return STATUS_HANDLER_ERROR;
  }
  const output = result.output;
  if (output === null) {
    writeError("handler returned neither output nor error");
    return STATUS_HANDLER_ERROR;
  }
  output_write(output.dataStart, output.length);
  return STATUS_OK;
}

/** Re-export from the entry file: export { pgflow_abi_version } from ".../abi/assemblyscript". */
export function pgflow_abi_version(): i32 {
  return ABI_VERSION;
}

/** The abort the build points --use abort= at: reports the message, then traps. */
export function pgflowAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let text = "abort: " + (message !== null ? message : "(no message)");
  if (fileName !== null) text += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  writeError(text);
  unreachable();
}
