// The prelude of every JavaScript handler. engine/c/pgflow_js.c evaluates it before the
// handler's bundle; its value is install(natives), which puts the web globals a pgflow
// handler expects on globalThis, built on the engine's natives (which never become globals),
// and returns the engine's hooks: prepare(), called once the bundle ran, finds the handler
// and returns run(input, context); describe(error); fireTimer(). Everything here ends up
// in the snapshot: nothing in it may depend on a task.
//
// This file and its imports (web.js, subtle.js, node.js, intl.js, sql.js, supabase.js and
// the npm packages of package.json) are bundled into one script at build time
// (mk/jsengine.mk, build.go).
import structuredCloneImpl from "@ungap/structured-clone";
import { installWeb } from "./web.js";
import { makeSubtle } from "./subtle.js";
import { makeNode } from "./node.js";
import { installIntl } from "./intl.js";
import { setHost as setIDNAHost } from "./tr46.js";
import pgflowSQL from "./sql.js";
import pgflowSupabase from "./supabase.js";

export function install(natives) {
  const { log, random, http, http_wait, config, sql, utf8_decode, utf8_encode, flow_input, compute_call } = natives;
  const g = globalThis;
  const define = (obj, name, value) =>
    Object.defineProperty(obj, name, { value, writable: true, configurable: true, enumerable: false });

  // ---- errors: what a task fails with ----------------------------------------------------

  // pgflow's own worker stores an Error's message, a string as it is and anything else as
  // JSON; the stack follows on the next lines (the worker maps it back to the sources).
  function message(e) {
    if (typeof e === "string") return e;
    if (e instanceof Error) return e.message === "" ? String(e.name) : String(e.message);
    try {
      const s = JSON.stringify(e);
      if (s !== undefined) return s;
    } catch {}
    return String(e);
  }
  function describe(e) {
    let text = message(e);
    if (e instanceof Error && typeof e.stack === "string" && e.stack !== "") text += "\n" + e.stack.replace(/\n+$/, "");
    if (e instanceof Error && e.cause !== undefined) text += "\ncaused by: " + describe(e.cause);
    return text;
  }

  // ---- console: lines of the task's log ----------------------------------------------------

  function show(v) {
    switch (typeof v) {
      case "string":
        return v;
      case "function":
        return `[Function ${v.name || "(anonymous)"}]`;
      case "bigint":
        return `${v}n`;
      case "undefined":
      case "symbol":
        return String(v);
    }
    if (v instanceof Error) return `${v.name}: ${v.message}` + (v.stack ? "\n" + v.stack.replace(/\n+$/, "") : "");
    try {
      const s = JSON.stringify(v);
      return s === undefined ? String(v) : s;
    } catch {
      return String(v);
    }
  }
  const logAt = (level) => (...args) => log(level, args.map(show).join(" "));
  define(g, "console", {
    debug: logAt(0), trace: logAt(0), log: logAt(1), info: logAt(1), warn: logAt(2), error: logAt(3),
  });

  // ---- randomness: WASI random_get, keyed per task by the sandbox ---------------------------

  Math.random = function random53() {
    const b = random(7);
    // 53 bits: 7 bytes less the top 3 bits of the first.
    let n = b[0] & 0x1f;
    for (let i = 1; i < 7; i++) n = n * 256 + b[i];
    return n / 2 ** 53;
  };
  const hex = (bytes) => Array.from(bytes, (x) => x.toString(16).padStart(2, "0")).join("");
  function getRandomValues(view) {
    if (!ArrayBuffer.isView(view) || view instanceof DataView || view instanceof Float32Array || view instanceof Float64Array)
      throw new TypeError("crypto.getRandomValues: the argument must be an integer typed array");
    if (view.byteLength > 65536) throw new DOMException(`crypto.getRandomValues: ${view.byteLength} bytes asked, at most 65536 at once`, "QuotaExceededError");
    new Uint8Array(view.buffer, view.byteOffset, view.byteLength).set(random(view.byteLength));
    return view;
  }
  function randomUUID() {
    const b = random(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = hex(b);
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  // ---- text ---------------------------------------------------------------------------------

  const toBytes = (data) => {
    if (data instanceof Uint8Array) return data;
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    throw new TypeError("expected an ArrayBuffer or a typed array");
  };
  class TextEncoder {
    get encoding() { return "utf-8"; }
    encode(s = "") { return utf8_encode(String(s)); }
    encodeInto(s, dest) {
      // Whole code points only, as many as fit.
      s = String(s);
      let read = 0, written = 0;
      for (const ch of s) {
        const b = utf8_encode(ch);
        if (written + b.length > dest.length) break;
        dest.set(b, written);
        written += b.length;
        read += ch.length;
      }
      return { read, written };
    }
  }
  const utf8Labels = ["utf-8", "utf8", "unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "x-unicode20utf8"];
  // The bytes that end b if they start a UTF-8 sequence b does not finish (0 to 3 of them).
  const incompleteTail = (b) => {
    for (let i = b.length - 1, n = 1; i >= 0 && n <= 4; i--, n++) {
      const x = b[i];
      if ((x & 0xc0) === 0x80) continue; // a continuation byte
      const need = x >= 0xf0 ? 4 : x >= 0xe0 ? 3 : x >= 0xc0 ? 2 : 1;
      return need > n ? n : 0;
    }
    return 0;
  };
  class TextDecoder {
    #fatal;
    #ignoreBOM;
    #pending = null; // the start of a sequence split across decode(..., {stream: true}) calls
    #started = false;
    constructor(label = "utf-8", options = {}) {
      if (!utf8Labels.includes(String(label).trim().toLowerCase())) throw new RangeError(`TextDecoder: only utf-8 is supported, not ${label}`);
      this.#fatal = Boolean(options?.fatal);
      this.#ignoreBOM = Boolean(options?.ignoreBOM);
    }
    get encoding() { return "utf-8"; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(data, options) {
      let b = data === undefined ? new Uint8Array(0) : toBytes(data);
      if (this.#pending !== null) {
        const joined = new Uint8Array(this.#pending.length + b.length);
        joined.set(this.#pending);
        joined.set(b, this.#pending.length);
        b = joined;
        this.#pending = null;
      }
      const stream = Boolean(options?.stream);
      if (stream) {
        const keep = incompleteTail(b);
        if (keep > 0) {
          this.#pending = b.slice(b.length - keep);
          b = b.subarray(0, b.length - keep);
        }
      }
      if (!this.#started && !this.#ignoreBOM && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) b = b.subarray(3);
      if (b.length > 0 || !stream) this.#started = stream;
      const s = utf8_decode(b);
      if (this.#fatal && s.includes("\ufffd")) {
        // A U+FFFD the bytes did not spell out themselves is a malformed sequence.
        const round = utf8_encode(s);
        if (round.length !== b.length || round.some((x, i) => x !== b[i])) throw new TypeError("TextDecoder: the data is not valid UTF-8");
      }
      return s;
    }
  }
  define(g, "TextEncoder", TextEncoder);
  define(g, "TextDecoder", TextDecoder);

  const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const domError = (message, name) => new g.DOMException(message, name);
  define(g, "btoa", function btoa(s) {
    if (arguments.length === 0) throw new TypeError("btoa: 1 argument required");
    s = String(s);
    let out = "";
    for (let i = 0; i < s.length; i += 3) {
      const c = [s.charCodeAt(i), s.charCodeAt(i + 1), s.charCodeAt(i + 2)];
      if (c.some((x) => x > 255)) throw domError("btoa: the string has characters outside Latin-1", "InvalidCharacterError");
      const n = (c[0] << 16) | ((c[1] || 0) << 8) | (c[2] || 0);
      out += b64[n >> 18] + b64[(n >> 12) & 63] + (i + 1 < s.length ? b64[(n >> 6) & 63] : "=") + (i + 2 < s.length ? b64[n & 63] : "=");
    }
    return out;
  });
  define(g, "atob", function atob(s) {
    if (arguments.length === 0) throw new TypeError("atob: 1 argument required");
    s = String(s).replace(/[\t\n\f\r ]/g, "");
    if (s.length % 4 === 0) s = s.replace(/={1,2}$/, "");
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) throw domError("atob: the string is not base64", "InvalidCharacterError");
    let out = "";
    for (let i = 0; i < s.length; i += 4) {
      const q = [...s.slice(i, i + 4)].map((ch) => b64.indexOf(ch));
      const n = (q[0] << 18) | (q[1] << 12) | ((q[2] ?? 0) << 6) | (q[3] ?? 0);
      out += String.fromCharCode(n >> 16);
      if (q.length > 2) out += String.fromCharCode((n >> 8) & 255);
      if (q.length > 3) out += String.fromCharCode(n & 255);
    }
    return out;
  });

  // ---- URL and URLSearchParams: whatwg-url, the standard's reference implementation ---------
  // (required here, not imported: it builds a TextEncoder when it loads).

  const { URL, URLSearchParams } = require("whatwg-url");
  define(g, "URL", URL);
  define(g, "URLSearchParams", URLSearchParams);

  define(g, "structuredClone", function structuredClone(value, options) {
    if (arguments.length === 0) throw new TypeError("structuredClone: 1 argument required");
    if (options?.transfer?.length) throw domError("structuredClone: transferring is not supported here", "DataCloneError");
    try {
      return structuredCloneImpl(value, { lossy: false });
    } catch (e) {
      throw domError(`structuredClone: ${e?.message ?? e}`, "DataCloneError");
    }
  });


  // ---- timers: due on the sandbox's monotonic clock ------------------------------------------
  // The engine waits for the next timer when nothing else can run (fireTimer returns how long):
  // a real wait on the host's clock, or, for a deterministic step, a jump of the fake clock.

  const monoNow = performance.now.bind(performance);
  // A task may have this many timers pending at once: each costs memory and a look at every
  // turn of the loop, and a runaway setInterval in a loop should fail clearly, early.
  const maxTimers = 10000;
  let timers = [];
  let timerSeq = 0;
  const addTimer = (fn, delay, args, repeat) => {
    const what = repeat ? "setInterval" : "setTimeout";
    if (typeof fn !== "function") throw new TypeError(`${what}: the callback must be a function (a string of code is not run)`);
    if (timers.length >= maxTimers)
      throw new RangeError(`${what}: ${maxTimers} timers are already pending, the most a task may have: clear the ones it no longer needs (clearTimeout, clearInterval)`);
    const ms = Math.max(0, Number(delay) || 0);
    const t = { id: ++timerSeq, at: monoNow() + ms, ms, fn, args, repeat };
    timers.push(t);
    return t.id;
  };
  const clearTimer = (id) => {
    const i = timers.findIndex((t) => t.id === id);
    if (i >= 0) timers.splice(i, 1);
  };
  define(g, "setTimeout", (fn, delay, ...args) => addTimer(fn, delay, args, false));
  define(g, "setInterval", (fn, delay, ...args) => addTimer(fn, delay, args, true));
  define(g, "clearTimeout", clearTimer);
  define(g, "clearInterval", clearTimer);
  // Runs the next timer if it is due and returns true. When it is not and a fetch's request
  // runs, waits for the request until the timer is due (or, with no timer, until it ends) and
  // returns true. Otherwise returns how many milliseconds remain (the engine sleeps that long
  // and asks again), or false when there is no timer (the engine then gives up on the promise).
  function fireTimer() {
    let wait = false;
    if (timers.length > 0) {
      let next = timers[0];
      for (const t of timers) if (t.at < next.at || (t.at === next.at && t.id < next.id)) next = t;
      wait = next.at - monoNow();
      if (wait <= 0) {
        if (next.repeat) next.at += Math.max(1, next.ms);
        else clearTimer(next.id);
        next.fn(...next.args);
        return true;
      }
    }
    if (web.waitRequest(wait === false ? -1 : Math.min(Math.ceil(wait), 2147483647))) return true;
    return wait;
  }

  // performance.timeOrigin is the wall-clock time performance.now() counts from; the engine's
  // own was read when the snapshot was made, so it is worked out from the clocks of the task.
  define(g, "performance", {
    now: () => monoNow(),
    get timeOrigin() { return Date.now() - monoNow(); },
    toJSON() { return { timeOrigin: this.timeOrigin }; },
  });

  // ---- the web platform: fetch and its family (web.js), crypto, Deno, Node built-ins, Intl ----

  const web = installWeb(g, define, { http, http_wait, utf8_decode, utf8_encode, monoNow, random, setTimeout: g.setTimeout, URLSearchParams, toBytes });
  const { subtle, CryptoKey, call: computeCall, b64: toB64, unb64 } = makeSubtle({ compute_call, toBytes, DOMException: web.DOMException });
  define(g, "CryptoKey", CryptoKey);
  const cryptoObj = { getRandomValues, randomUUID, subtle };
  Object.defineProperty(cryptoObj, Symbol.toStringTag, { value: "Crypto" });
  define(g, "crypto", cryptoObj);
  setIDNAHost(computeCall);
  const node = makeNode({ show, call: computeCall, b64: toB64, unb64, random, randomUUID, TextEncoder, TextDecoder, subtle, getRandomValues, CryptoKey });
  // Buffer is a global as in Deno's npm compatibility and Node, so npm packages that use it work.
  define(g, "Buffer", node.Buffer);
  // The bundle's imports of node:buffer, node:events, node:util and node:crypto read the
  // modules here (bundle.go).
  define(g, "__pgflow_node", (name) => node.modules[name]);
  installIntl(g, define);

  // ---- the handler's ctx ------------------------------------------------------------------

  // Names a runtime asks of any object (await, JSON.stringify, String()): never env lookups.
  const notEnvNames = new Set(["then", "toJSON", "toString", "valueOf", "constructor", "inspect", "asymmetricMatch", "$$typeof", "nodeType"]);
  const env = new Proxy(Object.freeze(Object.create(null)), {
    get(_, name) {
      if (typeof name !== "string" || notEnvNames.has(name)) return undefined;
      // As pgflow's ctx.env, a record: a name the step is not granted (or the worker lacks) is
      // undefined, not an error, so SDKs that probe for optional variables work.
      const v = config(name);
      return typeof v === "string" ? v : undefined;
    },
    has(_, name) {
      try {
        return typeof name === "string" && !notEnvNames.has(name) && typeof config(name) === "string";
      } catch {
        return false;
      }
    },
    set() { throw new TypeError("ctx.env is read-only"); },
    ownKeys() { return []; },
  });
  // Deno.env.get as Supabase's Edge Functions read their secrets: the step's granted names;
  // any other name, or one not set, is undefined (SDKs probe for optional variables).
  const denoEnv = Object.freeze({
    get(name) {
      const v = config(String(name));
      return typeof v === "string" ? v : undefined;
    },
    has(name) { return typeof config(String(name)) === "string"; },
    toObject() { return {}; },
    set() { throw new TypeError("Deno.env.set: the environment is read-only in pgflow-wasm (grant names with the step's env list in flows.yaml)"); },
    delete() { throw new TypeError("Deno.env.delete: the environment is read-only in pgflow-wasm"); },
  });
  define(g, "Deno", Object.freeze({ env: denoEnv }));

  // ---- ctx.sql: postgres.js's API on the step's SQL capability (sql.js) ----------------------

  const ctxSQL = pgflowSQL(natives);
  // supabase-js comes after the bundle of a step granted Supabase (prepare() takes it); until
  // then, and for other steps, ctx.supabase says what to grant when read (supabase.js).
  let defineSupabase = pgflowSupabase(undefined);

  const unavailable = (what, instead) =>
    ({ get() { throw new TypeError(`${what} is not available in pgflow-wasm: ${instead} (docs/from-typescript.md)`); }, enumerable: false });
  const neverAborted = new g.AbortController().signal;

  // pgflow 0.12 and later give a root step the flow input and a dependent step only its
  // dependencies' outputs; before, both got {"run": <flow input>, "<dep>": <output>}, which is
  // what the ABI gives every handler (abi/SPEC.md). A map step gets its element in both.
  // Every task runs this (as all of taskOf, in a fresh instance): string slices rather than
  // split and map, a fifth of what a greet task's JavaScript cost (docs/benchmarks.md).
  function atLeast(version, major, minor) {
    if (typeof version !== "string") return false;
    if (version.startsWith("main")) return true;
    const dot = version.indexOf(".");
    if (dot < 0) return Number(version) > major;
    const end = version.indexOf(".", dot + 1);
    const a = Number(version.slice(0, dot)), b = Number(end < 0 ? version.slice(dot + 1) : version.slice(dot + 1, end));
    return a > major || (a === major && b >= minor);
  }
  // What every task's ctx shares lives on its prototype, made once in the snapshot: sql
  // and the members that say what is unavailable (non-enumerable as own ones would be).
  const ctxProto = Object.create(Object.prototype, {
    sql: { value: ctxSQL, writable: true, configurable: true, enumerable: false },
    serviceSupabase: unavailable("ctx.serviceSupabase", "pgflow 0.6 replaced it with ctx.supabase, which pgflow-wasm gives"),
    anonSupabase: unavailable("ctx.anonSupabase", "pgflow 0.6 replaced it with ctx.supabase (the service role key), which pgflow-wasm gives"),
  });
  function taskOf(input, c) {
    let handlerInput = input;
    const deps = Array.isArray(c.depends_on) ? c.depends_on : [];
    if (atLeast(c.pgflow_version, 0, 12) && c.step_type === "single") {
      if (deps.length === 0) {
        handlerInput = input !== null && typeof input === "object" ? input.run : input;
      } else if (input !== null && typeof input === "object") {
        handlerInput = {};
        for (const k of Object.keys(input)) if (k !== "run") handlerInput[k] = input[k];
      }
    }
    const ctx = {
      __proto__: ctxProto,
      env,
      stepTask: {
        flow_slug: c.flow_slug, run_id: c.run_id, step_slug: c.step_slug, task_index: c.task_index,
        msg_id: c.msg_id, attempt: c.attempt, input: handlerInput,
      },
      rawMessage: {
        msg_id: c.msg_id, read_ct: c.attempt,
        message: { flow_slug: c.flow_slug, run_id: c.run_id, step_slug: c.step_slug, task_index: c.task_index },
      },
      idempotencyKey: c.idempotency_key,
      shutdownSignal: neverAborted,
    };
    // A single step's input carries the flow input under "run" (abi/SPEC.md); elsewhere it is
    // parsed from the context only if the handler reads it.
    if (c.step_type === "single" && input !== null && typeof input === "object" && "run" in input) ctx.flowInput = input.run;
    else if (!c.flow_input_omitted) {
      let value, parsed = false;
      Object.defineProperty(ctx, "flowInput", {
        get() {
          if (!parsed) [value, parsed] = [flow_input(), true];
          return value;
        },
        enumerable: true,
      });
    } else Object.defineProperty(ctx, "flowInput", unavailable("ctx.flowInput",
      `the run's input is ${c.flow_input_bytes} bytes, over the 64 KiB a map task's context carries; pass what the map needs in its array`));
    defineSupabase(ctx, env);
    return [handlerInput, ctx];
  }

  function prepare() {
    const ns = g.__pgflow_handler;
    const handler =
      ns == null ? undefined
      : typeof ns.default === "function" ? ns.default
      : typeof ns.handler === "function" ? ns.handler
      : typeof ns === "function" ? ns
      : undefined;
    if (handler === undefined)
      throw new TypeError("the handler module exports no handler: write `export default async function handler(input, ctx) { ... }`");
    const supabaseJS = Object.getOwnPropertyDescriptor(g, "__pgflow_supabase_js");
    if (supabaseJS !== undefined) {
      delete g.__pgflow_supabase_js;
      defineSupabase = pgflowSupabase(supabaseJS.value);
    }
    async function run(input, c) {
      const out = await handler(...taskOf(input, c));
      const json = JSON.stringify(out);
      return json === undefined ? "null" : json;
    }
    return run;
  }
  return { prepare, describe, fireTimer };
}
