// AssemblyScript reactor whose handler throws. Built with --use abort=assemblyscript/throw/abort
// (so there is no env.abort import): abort reports the message with error_write, then traps.
@external("pgflow", "error_write")
declare function error_write(ptr: usize, len: i32): void;

export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  const text = (message ? message : "abort") + " at " + (fileName ? fileName : "?") + ":" + line.toString();
  const buf = String.UTF8.encode(text);
  error_write(changetype<usize>(buf), buf.byteLength);
  unreachable();
}

export function pgflow_abi_version(): i32 {
  return 1;
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  if (inputLen >= 0) throw new Error("boom from AssemblyScript");
  return 0;
}
