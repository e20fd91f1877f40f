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

// Capabilities (optional imports; a step grants them in flows.yaml, see abi/SPEC.md).
// @ts-ignore: decorator
@external("pgflow", "http_request")
declare function http_request(
  method: usize, methodLen: usize, url: usize, urlLen: usize,
  headers: usize, headersLen: usize, body: usize, bodyLen: usize,
): i32;
// @ts-ignore: decorator
@external("pgflow", "http_response_read")
declare function http_response_read(part: i32, ptr: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("pgflow", "config_get")
declare function config_get(name: usize, nameLen: usize, ptr: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("pgflow", "last_error")
declare function last_error(ptr: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("pgflow", "sql_query")
declare function sql_query(request: usize, requestLen: usize): i32;
// @ts-ignore: decorator
@external("pgflow", "sql_result_read")
declare function sql_result_read(ptr: usize, cap: usize): i32;

import { Writer } from "./json";

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

/** Error codes of httpRequest, config and sqlQuery (the `code` of their results), as in the ABI. */
export const ERR_DENIED: i32 = -1; // the step has no `http` (`sql`) key, or the name is not in its `env` list
export const ERR_HOST_NOT_ALLOWED: i32 = -2; // the host (or a redirect's) matches no http.allow entry
export const ERR_ADDRESS_REFUSED: i32 = -3; // loopback, private, link-local, metadata... not named by http.allow
export const ERR_TOO_MANY_REQUESTS: i32 = -4; // over http.max_requests in this task (redirects count)
export const ERR_RESPONSE_TOO_LARGE: i32 = -5; // over http.max_response_bytes
export const ERR_REQUEST_TOO_LARGE: i32 = -6; // over http.max_request_bytes (or headers over 64 KiB)
export const ERR_BAD_REQUEST: i32 = -7; // an invalid method, URL, scheme or header
export const ERR_NETWORK: i32 = -8; // DNS, connection, TLS or protocol failure
export const ERR_TOO_MANY_REDIRECTS: i32 = -9;
export const ERR_NOT_SET: i32 = -10; // config: listed in `env` but not set in the worker's environment
export const ERR_SQL_REFUSED: i32 = -11; // sql: the statement filter refused the statement
export const ERR_SQL_FAILED: i32 = -12; // sql: PostgreSQL raised an error (the message names its SQLSTATE)

/** An HTTP response. An error status (404, 500) is a response like any other. */
export class Response {
  status: i32;
  /** "Name: value\n" lines, names in canonical form (Content-Type), sorted by name. */
  headers: string;
  body: Uint8Array;

  constructor(status: i32, headers: string, body: Uint8Array) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }

  /** The first value of the named header (any case), or null. */
  header(name: string): string | null {
    const want = name.toLowerCase();
    const lines = this.headers.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const sep = lines[i].indexOf(": ");
      if (sep > 0 && lines[i].substring(0, sep).toLowerCase() == want) return lines[i].substring(sep + 2);
    }
    return null;
  }

  /** The body as text (UTF-8). */
  text(): string {
    return String.UTF8.decodeUnsafe(this.body.dataStart, this.body.length);
  }
}

/** What httpRequest gives: a response, or an error message (the host's: it names the
 * flows.yaml key to change) with its code. */
export class HttpResult {
  response: Response | null;
  error: string | null;
  code: i32;

  constructor(response: Response | null, error: string | null, code: i32) {
    this.response = response;
    this.error = error;
    this.code = code;
  }
}

/** What config gives: the value, or an error message with its code. */
export class ConfigResult {
  value: string | null;
  error: string | null;
  code: i32;

  constructor(value: string | null, error: string | null, code: i32) {
    this.value = value;
    this.error = error;
    this.code = code;
  }
}

function lastError(): string {
  const buf = new Uint8Array(last_error(0, 0));
  if (buf.length > 0) last_error(buf.dataStart, buf.length);
  return String.UTF8.decodeUnsafe(buf.dataStart, buf.length);
}

function responsePart(part: i32): Uint8Array {
  const buf = new Uint8Array(http_response_read(part, 0, 0));
  if (buf.length > 0) http_response_read(part, buf.dataStart, buf.length);
  return buf;
}

/** Sends a request: method ("GET", "POST", ...), an absolute http(s) URL, headers as
 * "Name: value\n" lines ("" for none) and a body (null for none). Redirects are followed;
 * each hop must be allowed too. */
export function httpRequest(method: string, url: string, headers: string, body: Uint8Array | null): HttpResult {
  const m = String.UTF8.encode(method);
  const u = String.UTF8.encode(url);
  const h = String.UTF8.encode(headers);
  const status = http_request(
    changetype<usize>(m), m.byteLength, changetype<usize>(u), u.byteLength,
    changetype<usize>(h), h.byteLength,
    body !== null ? body.dataStart : 0, body !== null ? <usize>body.length : 0,
  );
  if (status < 0) return new HttpResult(null, lastError(), status);
  const head = responsePart(0);
  const response = new Response(status, String.UTF8.decodeUnsafe(head.dataStart, head.length), responsePart(1));
  return new HttpResult(response, null, 0);
}

/** GET url. */
export function httpGet(url: string): HttpResult {
  return httpRequest("GET", url, "", null);
}

/** Reads a named value the step may see: a name of its `env` list in flows.yaml, with the
 * worker's value. */
export function config(name: string): ConfigResult {
  const n = String.UTF8.encode(name);
  const size = config_get(changetype<usize>(n), n.byteLength, 0, 0);
  if (size < 0) return new ConfigResult(null, lastError(), size);
  const buf = new Uint8Array(size);
  if (size > 0) config_get(changetype<usize>(n), n.byteLength, buf.dataStart, size);
  return new ConfigResult(String.UTF8.decodeUnsafe(buf.dataStart, buf.length), null, 0);
}

/** What sqlQuery gives: the result JSON ({"columns": [...], "rows": [[...]], "row_count": N,
 * "command": "..."}), or an error message (the host's: with the SQLSTATE when PostgreSQL
 * raised it) with its code. */
export class SqlResult {
  json: string | null;
  error: string | null;
  code: i32;

  constructor(json: string | null, error: string | null, code: i32) {
    this.json = json;
    this.error = error;
    this.code = code;
  }
}

/** Runs one statement as the step's role (its `sql` section in flows.yaml). params is the
 * JSON array of the values of $1, $2, ... ("[]" for none; build it with json.Writer):
 * values travel apart from the statement and are never part of its text. */
export function sqlQuery(query: string, params: string = "[]"): SqlResult {
  const w = new Writer();
  w.raw('{"sql":').quoteString(query).raw(',"params":').raw(params).raw("}");
  const req = w.toBytes();
  const n = sql_query(req.dataStart, req.length);
  if (n < 0) return new SqlResult(null, lastError(), n);
  const buf = new Uint8Array(n);
  if (n > 0) sql_result_read(buf.dataStart, n);
  return new SqlResult(String.UTF8.decodeUnsafe(buf.dataStart, buf.length), null, 0);
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
