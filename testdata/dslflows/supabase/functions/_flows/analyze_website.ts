// A flow as pgflow's docs write one (@pgflow/dsl 0.8: every single step gets the run input
// under `run` and its dependencies' outputs under their slugs), its handlers inline. Served by
// pgflow-wasm from this file unchanged (flowfile/dsl_test.go, internal/worker/dsl_test.go).
import { Flow } from 'npm:@pgflow/dsl';

type Input = { url: string };

export default new Flow<Input>({ slug: 'analyze_website', maxAttempts: 2, timeout: 10 })
  .step({ slug: 'website' }, async (input) => {
    const url = new URL(input.run.url);
    return { host: url.hostname, content: `page of ${url.hostname} at ${url.pathname}` };
  })
  .step({ slug: 'sentiment', dependsOn: ['website'], timeout: 30, maxAttempts: 5 }, (input) => ({
    score: input.website.content.length / 100,
  }))
  .step({ slug: 'summary', dependsOn: ['website'], baseDelay: 2 }, (input) => ({
    aiSummary: input.website.content.toUpperCase(),
  }))
  .step({ slug: 'saveToDb', dependsOn: ['sentiment', 'summary'], startDelay: 0 }, async (input, ctx) => ({
    websiteUrl: input.run.url,
    sentiment: input.sentiment.score,
    summary: input.summary.aiSummary,
    savedBy: ctx.stepTask.step_slug,
  }));
