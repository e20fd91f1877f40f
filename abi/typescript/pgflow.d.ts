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
  readonly shutdownSignal: AbortSignalLike;
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

export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: unknown;
  throwIfAborted(): void;
  addEventListener(type: string, listener: () => void): void;
  removeEventListener(type: string, listener: () => void): void;
}

/** A step handler: what the module's default export must be. */
export type Handler<Input = unknown, Output = unknown, FlowInput = unknown> = (
  input: Input,
  ctx: Context<FlowInput, Input>,
) => Output | Promise<Output>;

// The sandbox's globals, beside the language's own (ES2023): no Node or Deno built-ins.
declare global {
  /** Lines of the task's log (debug, info, warn, error). */
  var console: {
    debug(...args: unknown[]): void;
    trace(...args: unknown[]): void;
    log(...args: unknown[]): void;
    info(...args: unknown[]): void;
    warn(...args: unknown[]): void;
    error(...args: unknown[]): void;
  };
  /**
   * An HTTP request through the step's `http` grant (allow-list, sizes, requests per task,
   * the step's timeout). A refused or failed request rejects with a TypeError whose message
   * says why and which flows.yaml key to change; `code` is the ABI's error code.
   */
  function fetch(resource: string | URL | { url: string }, init?: RequestInit): Promise<Response>;
  interface RequestInit {
    method?: string;
    headers?: HeadersInit;
    body?: string | ArrayBuffer | ArrayBufferView | URLSearchParams | null;
    signal?: unknown; // accepted, never used
  }
  type HeadersInit = Headers | Record<string, string> | Iterable<[string, string]>;
  class Headers {
    constructor(init?: HeadersInit);
    append(name: string, value: string): void;
    set(name: string, value: string): void;
    get(name: string): string | null;
    getSetCookie(): string[];
    has(name: string): boolean;
    delete(name: string): void;
    entries(): IterableIterator<[string, string]>;
    keys(): IterableIterator<string>;
    values(): IterableIterator<string>;
    forEach(fn: (value: string, name: string, headers: Headers) => void): void;
    [Symbol.iterator](): IterableIterator<[string, string]>;
  }
  class Response {
    constructor(body?: string | ArrayBuffer | ArrayBufferView | null, init?: { status?: number; statusText?: string; headers?: HeadersInit });
    readonly status: number;
    readonly statusText: string;
    readonly ok: boolean;
    readonly headers: Headers;
    readonly url: string;
    readonly redirected: boolean;
    readonly bodyUsed: boolean;
    text(): Promise<string>;
    json(): Promise<any>;
    arrayBuffer(): Promise<ArrayBuffer>;
    bytes(): Promise<Uint8Array>;
    clone(): Response;
    static json(data: unknown, init?: { status?: number; headers?: HeadersInit }): Response;
  }
  class URLSearchParams {
    constructor(init?: string | Record<string, string> | Iterable<[string, string]>);
    readonly size: number;
    append(name: string, value: string): void;
    delete(name: string): void;
    get(name: string): string | null;
    getAll(name: string): string[];
    has(name: string): boolean;
    set(name: string, value: string): void;
    sort(): void;
    forEach(fn: (value: string, name: string, params: URLSearchParams) => void): void;
    entries(): IterableIterator<[string, string]>;
    keys(): IterableIterator<string>;
    values(): IterableIterator<string>;
    [Symbol.iterator](): IterableIterator<[string, string]>;
    toString(): string;
  }
  /** Absolute URLs and references resolved against a base (no internationalised host names). */
  class URL {
    constructor(url: string | URL, base?: string | URL);
    readonly protocol: string;
    readonly host: string;
    readonly hostname: string;
    readonly port: string;
    readonly origin: string;
    pathname: string;
    search: string;
    hash: string;
    readonly searchParams: URLSearchParams;
    readonly href: string;
    toString(): string;
    toJSON(): string;
    static canParse(url: string, base?: string): boolean;
  }
  /** Random bytes of the task (reproducible with `deterministic: true`). */
  var crypto: { getRandomValues<T extends ArrayBufferView>(view: T): T; randomUUID(): string };
  class TextEncoder {
    readonly encoding: "utf-8";
    encode(text?: string): Uint8Array;
  }
  class TextDecoder {
    constructor(label?: "utf-8" | "utf8");
    readonly encoding: "utf-8";
    decode(data?: ArrayBuffer | ArrayBufferView): string;
  }
  function btoa(data: string): string;
  function atob(data: string): string;
  /** Timers wait on the real clock (a step with `deterministic: true` has a fixed clock: they
   * fire in order without waiting). A wait past the step's timeout fails the task. */
  function setTimeout(fn: (...args: any[]) => void, ms?: number, ...args: any[]): number;
  function setInterval(fn: (...args: any[]) => void, ms?: number, ...args: any[]): number;
  function clearTimeout(id?: number): void;
  function clearInterval(id?: number): void;
  function queueMicrotask(fn: () => void): void;
}
