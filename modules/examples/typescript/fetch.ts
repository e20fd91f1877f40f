// The fetch example in TypeScript: {"url": "..."} -> {"status": 200, "bytes": 1256}, through
// the step's http grant (flows.yaml `http.allow`).
type Ctx = { flowInput: { url?: unknown } };

export default async function fetchExample(_input: unknown, ctx: Ctx) {
  const { url } = ctx.flowInput;
  if (typeof url !== "string") throw new Error("fetch: the flow input's url must be a string");
  const res = await fetch(url);
  return { status: res.status, bytes: (await res.arrayBuffer()).byteLength };
}
