// Unit tests of __NAME__.wasm (node --test): the built module, called as the worker calls
// it (pgflow_handle in a fresh instance), with a test host.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { TestHost, context } from "../pgflow/testhost.mjs";

const host = new TestHost(readFileSync(new URL("../__NAME__.wasm", import.meta.url)));
const call = (input) => host.call(input, context("__NAME__", "__NAME__"));

test("greets by name", () => {
  const got = call('{"run": {"name": "Ada"}}');
  assert.equal(got.status, 0, got.error ?? String(got.trap));
  assert.equal(got.output, '{"greeting":"Hello, Ada!"}');
  assert.deepEqual(got.logs, [{ level: "info", message: "greeting Ada, attempt 1" }]);
});

test("fails without a name", () => {
  const got = call('{"run": {}}');
  assert.equal(got.status, 1);
  assert.equal(got.error, '__NAME__: input.run.name must be a string, e.g. {"name": "Ada"}');
});
