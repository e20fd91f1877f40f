// The greet example in TypeScript: {"name": "Ada"} -> {"greeting": "Hello, Ada!"}. It reads
// the flow input from ctx.flowInput, which every pgflow gives the same way (the handler's
// own input is {"run": ...} before pgflow 0.12 and the flow input itself from 0.12 on).
type Ctx = { flowInput: { name?: unknown } };

export default async function greet(_input: unknown, ctx: Ctx) {
  const { name } = ctx.flowInput;
  if (typeof name !== "string") throw new Error("greet: the flow input's name must be a string");
  return { greeting: `Hello, ${name}!` };
}
