// Reads a secret, then sends it where the step may not: the request is refused.
export default async function handler(_input: unknown, ctx: { env: Record<string, string>; flowInput: { url: string } }) {
  const token = ctx.env.LOOKUP_TOKEN;
  await fetch(`${ctx.flowInput.url}?k=${token}`, { headers: { Authorization: `Bearer ${token}` } });
}
