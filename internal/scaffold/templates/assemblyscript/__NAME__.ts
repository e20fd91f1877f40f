// __NAME__: a pgflow-wasm step handler. It gets the step input and the task context as
// JSON (UTF-8 bytes) and returns the output JSON, or an error that fails the task.
import { Kind, Level, Result, Writer, log, parse, parseError, run } from "./pgflow";
export { pgflow_abi_version } from "./pgflow";

function handle(input: Uint8Array, context: Uint8Array): Result {
  const root = parse(input);
  if (root === null) return Result.err("__NAME__: invalid input JSON: " + parseError());
  // The flow input is under "run"; a step with dependencies also gets their outputs.
  const flowInput = root.get("run");
  const name = flowInput !== null ? flowInput.get("name") : null;
  if (name === null || name.kind != Kind.String) {
    return Result.err('__NAME__: input.run.name must be a string, e.g. {"name": "Ada"}');
  }
  const ctx = parse(context);
  const attempt = ctx !== null ? ctx.get("attempt") : null;
  if (attempt === null || attempt.kind != Kind.Number) return Result.err("__NAME__: the context has no attempt");
  log(Level.Info, "greeting " + name.toText() + ", attempt " + (<i32>attempt.num).toString());
  const greeting = new Writer().raw("Hello, ").bytes(name.str).raw("!").toBytes();
  return Result.okBytes(new Writer().raw('{"greeting":').quote(greeting).raw("}").toBytes());
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, handle);
}
