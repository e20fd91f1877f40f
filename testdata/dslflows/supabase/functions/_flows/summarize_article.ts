// A flow in the style of pgflow 0.12 and later (a root step gets the run input itself, a
// dependent step only its dependencies' outputs), for pgflow main. Its `publish` step is
// served by another worker in the split-flow test (internal/worker/dsl_test.go).
import { Flow } from '@pgflow/dsl';

export const SummarizeArticle = new Flow<{ title: string; body: string }>({ slug: 'summarize_article', timeout: 15 })
  .step({ slug: 'words' }, (article: { title: string; body: string }) => article.body.split(/\s+/).filter(Boolean))
  .step({ slug: 'summary', dependsOn: ['words'] }, (deps: { words: string[] }) => ({
    count: deps.words.length,
    first: deps.words.slice(0, 3).join(' '),
  }))
  .step({ slug: 'publish', dependsOn: ['summary'] }, (deps: { summary: { count: number } }) => ({ published: deps.summary.count }))
  .step({ slug: 'notify', dependsOn: ['publish', 'summary'] }, (deps: { publish: { published: number }; summary: { first: string } }) =>
    `${deps.summary.first}... (${deps.publish.published} words)`);
