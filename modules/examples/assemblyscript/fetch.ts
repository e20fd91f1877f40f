// fetch: {"run": {"url": "https://..."}} -> {"status":200,"bytes":1256}
//
// GETs the URL through the host (the step's http.allow in flows.yaml must cover it). An
// HTTP error status is an output like any other; a refused request fails the task with the
// host's message.
import { Kind, Result, httpGet, parse, parseError, run } from "../../../abi/assemblyscript";
export { pgflow_abi_version } from "../../../abi/assemblyscript";

function fetch(input: Uint8Array, context: Uint8Array): Result {
  const root = parse(input);
  if (root === null) return Result.err("fetch: invalid JSON input: " + parseError());
  const run = root.get("run");
  const url = run !== null ? run.get("url") : null;
  if (url === null || url.kind != Kind.String) return Result.err("fetch: input.run.url must be a string");
  const got = httpGet(url.toText());
  const resp = got.response;
  if (resp === null) return Result.err(got.error !== null ? got.error! : "fetch: no response");
  return Result.ok('{"status":' + resp.status.toString() + ',"bytes":' + resp.body.length.toString() + "}");
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, fetch);
}
