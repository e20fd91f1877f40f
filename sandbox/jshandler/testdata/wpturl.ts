// The web-platform-tests' URL cases (as @wordpress/url ships them: each input, and whether
// parsing it must fail): which ones this sandbox's URL parses and which it refuses.
export default async function handler(input: { cases: { input: string; failure?: boolean }[] }) {
  const wrong: string[] = [];
  for (const c of input.cases) {
    let parsed = false, href = "";
    try {
      href = new URL(c.input).href;
      parsed = true;
    } catch {}
    if (parsed === Boolean(c.failure)) wrong.push(`${JSON.stringify(c.input)}: ${parsed ? "parsed as " + href : "refused"}`);
  }
  return { cases: input.cases.length, wrong };
}
