// Types of what a TypeScript or JavaScript step handler gets from pgflow-wasm: the ctx
// argument and the globals of the sandbox (docs/from-typescript.md of pgflow-wasm).
//
//   import type { Context } from "./pgflow/pgflow";
//   export default async function handler(input: MyInput, ctx: Context<MyFlowInput>) { ... }
//
// The handler's input is what pgflow's own TypeScript worker would pass on the same
// database: from pgflow 0.12, the flow input for a step without dependencies and
// {"<dependency>": <its output>, ...} for the others; before 0.12, {"run": <flow input>,
// "<dependency>": <its output>, ...}; for a map step, its element. ctx.flowInput is the flow
// input on every version.

/** Names and numbers of one task, as pgflow's step_tasks row has them. */
export interface StepTask<Input = unknown> {
  flow_slug: string;
  run_id: string;
  step_slug: string;
  /** 0 for a single step; the element's index for a map step. */
  task_index: number;
  msg_id: number;
  /** 1 on the first try, 2 on the first retry... */
  attempt: number;
  input: Input;
}

export interface Context<FlowInput = unknown, Input = unknown> {
  /**
   * The worker's environment variables the step may read: only the names its `env` key in
   * flows.yaml lists. A listed name the worker does not have is undefined; reading any other
   * name throws, saying which key to change.
   */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** The run's input. A map task of a run whose input is over 64 KiB cannot read it (it throws). */
  readonly flowInput: FlowInput;
  readonly stepTask: StepTask<Input>;
  /** The pgmq message of the task: read_ct is the attempt. */
  readonly rawMessage: { msg_id: number; read_ct: number; message: { flow_slug: string; run_id: string; step_slug: string; task_index: number } };
  /** "<run_id>:<step_slug>:<task_index>": the same on every attempt of this task. Send it to APIs that deduplicate. */
  readonly idempotencyKey: string;
  /** Never aborted: the worker stops a handler at its step's timeout instead. */
  readonly shutdownSignal: AbortSignal;
  /**
   * One SQL statement as the step's role (its `sql` section in flows.yaml), as a tagged
   * template: each ${value} is a parameter ($1, $2...), never text of the statement.
   * Resolves to the rows (objects keyed by column) with count, command and columns; rejects
   * with the host's refusal or PostgreSQL's error (its SQLSTATE in the message). Without an
   * `sql` section every call rejects. The Supabase clients do not exist.
   */
  readonly sql: SQL;
}

export interface SQL {
  <Row extends Record<string, unknown> = Record<string, unknown>>(strings: TemplateStringsArray, ...values: unknown[]): Promise<SQLRows<Row>>;
}

export type SQLRows<Row> = Row[] & { readonly count: number; readonly command: string; readonly columns: ReadonlyArray<{ name: string }> };

/** @deprecated ctx.shutdownSignal is a real AbortSignal. */
export type AbortSignalLike = AbortSignal;

/** A step handler: what the module's default export must be. */
export type Handler<Input = unknown, Output = unknown, FlowInput = unknown> = (
  input: Input,
  ctx: Context<FlowInput, Input>,
) => Output | Promise<Output>;

// The sandbox's globals are the web platform of WinterTC's Minimum Common API (fetch, URL,
// AbortController, Blob, FormData, streams, crypto.subtle, structuredClone, timers...):
// their types are TypeScript's own "WebWorker" library, which the project's tsconfig.json
// names ("lib": ["ES2023", "WebWorker"]). Here is what the sandbox adds of Deno's; the types
// of node:buffer, node:crypto, node:events and node:util are @types/node's.
declare global {
  /** Deno.env as Supabase's Edge Functions read secrets: the step's granted names (its `env`
   * list in flows.yaml); any other name, or one not set, is undefined. */
  var Deno: {
    readonly env: {
      get(name: string): string | undefined;
      has(name: string): boolean;
      toObject(): Record<string, string>;
    };
  };
}
