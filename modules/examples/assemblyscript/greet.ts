// greet: {"run": {"name": "Ada"}} -> {"greeting":"Hello, Ada!"}
import { Kind, Result, Writer, parse, parseError, run } from "../../../abi/assemblyscript";
export { pgflow_abi_version } from "../../../abi/assemblyscript";

function greet(input: Uint8Array, context: Uint8Array): Result {
  const root = parse(input);
  if (root === null) return Result.err("greet: invalid JSON input: " + parseError());
  const run = root.get("run");
  const name = run !== null ? run.get("name") : null;
  if (name === null || name.kind != Kind.String) return Result.err("greet: input.run.name must be a string");
  const greeting = new Writer().raw("Hello, ").bytes(name.str).raw("!").toBytes();
  return Result.okBytes(new Writer().raw('{"greeting":').quote(greeting).raw("}").toBytes());
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, greet);
}
