// Map steps as pgflow's docs write them: a root map over the run input, a map over a step's
// array, an array step and map chains, two flows in one file. Handlers inline.
import { Flow } from '@pgflow/dsl';

export const TextProcessing = new Flow<string[]>({ slug: 'text_processing', baseDelay: 1 })
  .map({ slug: 'normalize' }, (text) => text.trim().toLowerCase())
  .map({ slug: 'capitalize', array: 'normalize', maxAttempts: 4 }, (text) => text.charAt(0).toUpperCase() + text.slice(1))
  .step({ slug: 'summarize', dependsOn: ['capitalize'] }, (input) => ({
    processed: input.capitalize.length,
    results: input.capitalize,
  }));

export const Squares = new Flow<{ numbers: number[] }>({ slug: 'squares', timeout: 20 })
  .array({ slug: 'numbers' }, (input) => input.run.numbers.filter((n) => Number.isFinite(n)))
  .map({ slug: 'square', array: 'numbers' }, (n) => n * n)
  .step({ slug: 'total', dependsOn: ['square'] }, (input) => input.square.reduce((a, b) => a + b, 0));
