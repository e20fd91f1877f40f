// The flow of __NAME__, written with pgflow's own DSL (@pgflow/dsl, pinned in package.json):
// pgflow-wasm serves it from this file as it is (flows.yaml names it; `pgflow-wasm serve
// --flows flow.ts` serves it without one), and pgflow's own compiler reads the same file. Add
// steps here (.step, .array, .map, dependsOn, maxAttempts, timeout...); what a step may reach
// (HTTP hosts, environment variables, SQL) is granted in flows.yaml.
import { Flow } from "@pgflow/dsl";
import type { Context } from "./pgflow/pgflow";
import handler from "./__NAME__";

type Input = { name: string };

export default new Flow<Input>({ slug: "__NAME__" })
  // pgflow-wasm's ctx has what the DSL's context types and more (flowInput,
  // idempotencyKey, sql): pgflow/pgflow.d.ts.
  .step({ slug: "__NAME__" }, (input, ctx) => handler(input, ctx as unknown as Context<Input>));
