export default async function handler(input: { name: string }, ctx: { env: Record<string, string | undefined> }) {
  return { value: ctx.env[input.name] ?? null, keys: Object.keys(ctx.env), json: JSON.stringify(ctx.env) };
}
