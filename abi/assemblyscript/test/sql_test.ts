// Test handler for the SQL calls of pgflow.ts, run by sql_test.mjs through testhost.mjs.
import { ERR_SQL_REFUSED, Result, Writer, run, sqlQuery } from "..";
export { pgflow_abi_version } from "..";

function handle(input: Uint8Array, context: Uint8Array): Result {
  const params = new Writer().raw("[7,").quoteString('it\'s "q"\n').raw(",null,true]").toBytes();
  const got = sqlQuery("select $1::int as n, $2, $3, $4", String.UTF8.decodeUnsafe(params.dataStart, params.length));
  if (got.json === null) return Result.err(got.error!);
  const refused = sqlQuery("set role postgres");
  if (refused.code != ERR_SQL_REFUSED) return Result.err("the refusal did not come back");
  return Result.ok('{"result":' + got.json! + ',"why":"' + refused.error! + '"}');
}

export function pgflow_handle(inputLen: i32, contextLen: i32): i32 {
  return run(inputLen, contextLen, handle);
}
