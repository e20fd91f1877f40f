// Runs sql_test.wasm through the test host: the request the library builds, the result it
// reads back, a refusal's code and message, and SQL denied without a grant.
// Usage: node sql_test.mjs sql_test.wasm
import assert from "node:assert/strict";
import fs from "node:fs";
import { TestHost, context } from "../testhost.mjs";

const wasm = fs.readFileSync(process.argv[2]);
const seen = [];
const host = new TestHost(wasm, {
  sql: (req) => {
    seen.push(req);
    if (req.sql.startsWith("set role")) return { error: -11, message: "sql: SET statements are not allowed" };
    return { columns: ["n"], rows: [[7]], row_count: 1, command: "SELECT 1" };
  },
});
const got = host.call("{}", context("f", "s"));
assert.equal(got.error, null);
assert.equal(got.status, 0);
assert.deepEqual(JSON.parse(got.output), {
  result: { columns: ["n"], rows: [[7]], row_count: 1, command: "SELECT 1" },
  why: "sql: SET statements are not allowed",
});
assert.deepEqual(seen, [
  { sql: "select $1::int as n, $2, $3, $4", params: [7, 'it\'s "q"\n', null, true] },
  { sql: "set role postgres", params: [] },
]);
const denied = new TestHost(wasm).call("{}", context("f", "s"));
assert.equal(denied.status, 1);
assert.match(denied.error, /SQL is denied/);
console.log("PASS");
