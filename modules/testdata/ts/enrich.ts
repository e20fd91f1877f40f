// A map task in TypeScript: one element of its dependency's array, scored by an HTTP API
// with a token read from ctx.env. Used by the worker's tests (internal/worker).
type Counted = { text: string; words: number };
type Ctx = { env: Record<string, string | undefined>; stepTask: { task_index: number }; idempotencyKey: string };

export default async function enrich(item: Counted, ctx: Ctx) {
  console.debug("scoring", item.text);
  const res = await fetch(`${ctx.env.LOOKUP_URL}/score?text=${encodeURIComponent(item.text)}`, {
    headers: { Authorization: `Bearer ${ctx.env.LOOKUP_TOKEN}`, "Idempotency-Key": ctx.idempotencyKey },
  });
  if (!res.ok) throw new Error(`the scoring API answered ${res.status}`);
  const { score } = (await res.json()) as { score: number };
  return { ...item, score, task: ctx.stepTask.task_index };
}
