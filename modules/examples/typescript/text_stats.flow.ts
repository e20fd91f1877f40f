// A pgflow flow file, served as it is (flows.yaml: `- flow: modules/examples/typescript/text_stats.flow.ts`):
// the flow's shape and its handlers inline, written with @pgflow/dsl as for pgflow's own
// worker. The steps are written for the pgflow make run installs (0.8.1), where every step
// gets `{ run, ...dependencies }`; from pgflow 0.12 a root step gets the run input itself.
//   pgflow-wasm start text_stats --input '{"text": "the quick brown fox\njumps over the lazy dog"}' --wait
import { Flow } from '@pgflow/dsl';

type Input = { text: string };

export const TextStats = new Flow<Input>({ slug: 'text_stats', maxAttempts: 3, timeout: 10 })
  // An array step: its output is the list the map below fans out over.
  .array({ slug: 'lines' }, (input) => input.run.text.split('\n').filter((line) => line.trim() !== ''))
  // A map step: one task per line, each in a fresh sandbox.
  .map({ slug: 'words', array: 'lines' }, (line) => line.split(/\s+/).filter(Boolean).length)
  // The web platform in the sandbox: crypto.subtle is done by the worker in Go.
  .step({ slug: 'fingerprint' }, async (input) => {
    const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(input.run.text));
    return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
  })
  .step({ slug: 'summary', dependsOn: ['words', 'fingerprint'] }, (input) => ({
    lines: input.words.length,
    words: input.words.reduce((sum, n) => sum + n, 0),
    sha256: input.fingerprint,
  }));
