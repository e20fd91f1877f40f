// A stand-in for the pgflow-wasm worker in unit tests under Node (node --test): it loads a
// built handler module, gives it the ABI's imports, and calls pgflow_handle in a fresh
// instance per call, as the worker runs one task. Nothing is granted unless the test grants
// it (config values, an HTTP responder), as for a step without `env` and `http` keys.
//
//   import { TestHost, context } from "./pgflow/testhost.mjs";
//   const host = new TestHost(fs.readFileSync("hello.wasm"));
//   const got = host.call('{"run":{"name":"Ada"}}', context("hello", "hello"));
//   // got: { status: 0, output: '{"greeting":"Hello, Ada!"}', error: null, logs: [...] }

const LEVELS = ["debug", "info", "warn", "error"];
const ERR_DENIED = -1;
const ERR_BAD_REQUEST = -7;
const ERR_NETWORK = -8;

export class TestHost {
  /**
   * @param {BufferSource | WebAssembly.Module} wasm the handler module
   * @param {{config?: Record<string, string>, http?: (req: {method: string, url: string, headers: string, body: Uint8Array}) =>
   *   ({status: number, headers?: string, body?: string | Uint8Array} | {error: number, message: string}),
   *   sql?: (req: {sql: string, params: any[]}) => (object | {error: number, message: string})}} grants
   *   config: named values (a step's `env` list); http: answers every request (headers are "Name: value\n" lines);
   *   sql: answers every statement with its result ({columns, rows, row_count, command}) or an error
   */
  constructor(wasm, grants = {}) {
    this.module = wasm instanceof WebAssembly.Module ? wasm : new WebAssembly.Module(wasm);
    // The worker would refuse the module at load: say so here, naming the imports.
    const foreign = WebAssembly.Module.imports(this.module).filter((i) => i.module !== "pgflow").map((i) => `${i.module}.${i.name}`);
    if (foreign.length > 0) {
      throw new Error(`the module imports ${foreign.join(", ")}: the worker refuses it (\`pgflow-wasm module inspect\` explains each import)`);
    }
    this.config = grants.config ?? null;
    this.http = grants.http ?? null;
    this.sql = grants.sql ?? null;
  }

  /**
   * Calls the handler once. input and context are JSON texts.
   * @returns {{status: number, output: string | null, error: string | null, logs: {level: string, message: string}[], trap: Error | null}}
   *   status: 0 completed, 1 failed (error), -1 trapped (trap: the exception; error: what the guest wrote first)
   */
  call(input, context) {
    const enc = new TextEncoder();
    const dec = new TextDecoder();
    const inBytes = enc.encode(input);
    const ctxBytes = enc.encode(context);
    const got = { status: -1, output: null, error: null, logs: [], trap: null };
    let mem = null;
    let response = null;
    let sqlResult = new Uint8Array();
    let lastError = "";
    const bytes = (ptr, len) => new Uint8Array(mem.buffer, ptr, len);
    const text = (ptr, len) => dec.decode(bytes(ptr, len));
    // The ABI's pull pattern: copy at most cap bytes, return the whole length.
    const copyOut = (data, ptr, cap) => {
      if (cap > 0) bytes(ptr, Math.min(cap, data.length)).set(data.subarray(0, cap));
      return data.length;
    };
    const fail = (code, message) => {
      lastError = message;
      return code;
    };
    const pgflow = {
      input_read: (ptr) => bytes(ptr, inBytes.length).set(inBytes),
      context_read: (ptr) => bytes(ptr, ctxBytes.length).set(ctxBytes),
      output_write: (ptr, len) => { got.output = text(ptr, len); },
      error_write: (ptr, len) => { got.error = text(ptr, len); },
      log: (level, ptr, len) => { got.logs.push({ level: LEVELS[level] ?? "error", message: text(ptr, len) }); },
      http_request: (mp, ml, up, ul, hp, hl, bp, bl) => {
        response = null;
        if (this.http === null) {
          return fail(ERR_DENIED, "pgflow test host: HTTP is denied (grant it with new TestHost(wasm, {http}), as a step's `http` key in flows.yaml does)");
        }
        const req = { method: text(mp, ml) || "GET", url: text(up, ul), headers: text(hp, hl), body: bytes(bp, bl).slice() };
        const r = this.http(req);
        if (r.error !== undefined) return fail(r.error, r.message ?? "refused by the test responder");
        if (!(r.status >= 100 && r.status <= 599)) return fail(ERR_NETWORK, "pgflow test host: the responder gave no status (100-599)");
        const body = typeof r.body === "string" ? enc.encode(r.body) : (r.body ?? new Uint8Array());
        response = { status: r.status, headers: enc.encode(r.headers ?? ""), body };
        return r.status;
      },
      http_response_read: (part, ptr, cap) => {
        if (response === null) return 0;
        return copyOut(part === 0 ? response.headers : response.body, ptr, cap);
      },
      config_get: (np, nl, ptr, cap) => {
        const name = text(np, nl);
        if (this.config === null || !Object.hasOwn(this.config, name)) {
          return fail(ERR_DENIED, `pgflow test host: ${name} is not granted (new TestHost(wasm, {config}); a step reads only the names of its \`env\` list)`);
        }
        return copyOut(enc.encode(this.config[name]), ptr, cap);
      },
      last_error: (ptr, cap) => copyOut(enc.encode(lastError), ptr, cap),
      sql_query: (rp, rl) => {
        sqlResult = new Uint8Array();
        if (this.sql === null) {
          return fail(ERR_DENIED, "pgflow test host: SQL is denied (grant it with new TestHost(wasm, {sql}), as a step's `sql` key in flows.yaml does)");
        }
        let req;
        try {
          req = JSON.parse(text(rp, rl));
        } catch (e) {
          return fail(ERR_BAD_REQUEST, `pgflow test host: the request is not JSON: ${e.message}`);
        }
        const r = this.sql(req);
        if (r.error !== undefined) return fail(r.error, r.message ?? "refused by the test responder");
        sqlResult = enc.encode(JSON.stringify(r));
        return sqlResult.length;
      },
      sql_result_read: (ptr, cap) => copyOut(sqlResult, ptr, cap),
    };
    const instance = new WebAssembly.Instance(this.module, { pgflow });
    mem = instance.exports.memory;
    if (instance.exports._initialize) instance.exports._initialize();
    try {
      got.status = instance.exports.pgflow_handle(inBytes.length, ctxBytes.length);
    } catch (e) {
      got.trap = e;
    }
    return got;
  }
}

/** A context JSON like the worker's for a task of step in flow: first attempt, task 0, fixed ids. */
export function context(flow = "test", step = "test") {
  const runId = "00000000-0000-4000-8000-000000000001";
  return JSON.stringify({
    run_id: runId, flow_slug: flow, step_slug: step, task_index: 0, attempt: 1, msg_id: 1, flow_input: null,
    worker_id: "00000000-0000-4000-8000-000000000002", timeout_ms: 60000, idempotency_key: `${runId}:${step}:0`,
  });
}
