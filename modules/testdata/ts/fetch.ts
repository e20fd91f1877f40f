// The fetch example of the other languages ({"url": ...} -> {"status": ..., "bytes": ...}).
export default async function handler(_input: unknown, ctx: { flowInput: { url: string } }) {
  const res = await fetch(ctx.flowInput.url);
  return { status: res.status, bytes: (await res.arrayBuffer()).byteLength };
}
