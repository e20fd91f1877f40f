export default async function handler(input: { url: string; method?: string; body?: string }, ctx: any) {
  const res = await fetch(input.url, {
    method: input.method ?? "GET",
    headers: { Authorization: `Bearer ${ctx.env.API_TOKEN}`, "X-Idempotency-Key": ctx.idempotencyKey },
    body: input.body,
  });
  const type = res.headers.get("content-type") ?? "";
  const body = type.startsWith("application/json") ? await res.json() : await res.text();
  return { status: res.status, ok: res.ok, type, body };
}
