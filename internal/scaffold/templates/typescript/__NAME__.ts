// __NAME__: a pgflow step handler in TypeScript, the shape pgflow's own workers run. The
// worker bundles this file (and what it imports) when it loads the step and runs it in its
// JavaScript engine, in the sandbox: a fresh instance per task, the step's timeout and memory
// limit, and only the HTTP hosts and environment variables flows.yaml grants.
import type { Context } from "./pgflow/pgflow";

type FlowInput = { name?: unknown };
type Output = { greeting: string };

// The input is what pgflow's TypeScript worker gives this step on the same database: from
// pgflow 0.12 the flow input (this step has no dependencies), before 0.12 {"run": <flow
// input>}. ctx.flowInput is the flow input on every version.
export default async function handler(_input: unknown, ctx: Context<FlowInput>): Promise<Output> {
  const { name } = ctx.flowInput;
  if (typeof name !== "string") {
    throw new Error(`__NAME__: the flow input's name must be a string, e.g. {"name": "Ada"}`);
  }
  console.log(`greeting ${name}, attempt ${ctx.stepTask.attempt}`);
  return { greeting: `Hello, ${name}!` };
}
