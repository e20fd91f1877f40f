// A TypeScript step after a map step and a C step: its input is their outputs.
type Enriched = { text: string; words: number; score: number };

export default async function report(deps: { enrich: Enriched[]; total_c: { sum: number } }, ctx: { flowInput: string[] }) {
  return {
    words: deps.total_c.sum,
    best: Math.max(...deps.enrich.map((e) => e.score)),
    lines: ctx.flowInput.length,
    keys: Object.keys(deps).sort(),
  };
}
