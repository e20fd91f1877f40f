// The prelude of every JavaScript handler. engine/c/pgflow_js.c evaluates it before the
// handler's bundle; its value is install(natives), which puts the web globals a pgflow
// handler expects on globalThis, built on the engine's natives (which never become globals),
// and returns the engine's hooks: prepare(), called once the bundle ran, finds the handler
// and returns run(input, context); describe(error); fireTimer(). Everything here ends up
// in the snapshot: nothing in it may depend on a task.
(function install(natives) {
  "use strict";
  const { log, random, http, config, sql, utf8_decode, utf8_encode, flow_input } = natives;
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
  define(g, "crypto", {
    getRandomValues(view) {
      if (!ArrayBuffer.isView(view)) throw new TypeError("crypto.getRandomValues: the argument must be a typed array");
      new Uint8Array(view.buffer, view.byteOffset, view.byteLength).set(random(view.byteLength));
      return view;
    },
    randomUUID() {
      const b = random(16);
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const h = hex(b);
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    },
  });

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
  }
  class TextDecoder {
    constructor(label = "utf-8") {
      if (!/^utf-?8$/i.test(String(label))) throw new RangeError(`TextDecoder: only utf-8 is supported, not ${label}`);
    }
    get encoding() { return "utf-8"; }
    decode(data) { return data === undefined ? "" : utf8_decode(toBytes(data)); }
  }
  define(g, "TextEncoder", TextEncoder);
  define(g, "TextDecoder", TextDecoder);

  const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  define(g, "btoa", (s) => {
    s = String(s);
    let out = "";
    for (let i = 0; i < s.length; i += 3) {
      const c = [s.charCodeAt(i), s.charCodeAt(i + 1), s.charCodeAt(i + 2)];
      if (c.some((x) => x > 255)) throw new TypeError("btoa: the string has characters outside Latin-1");
      const n = (c[0] << 16) | ((c[1] || 0) << 8) | (c[2] || 0);
      out += b64[n >> 18] + b64[(n >> 12) & 63] + (i + 1 < s.length ? b64[(n >> 6) & 63] : "=") + (i + 2 < s.length ? b64[n & 63] : "=");
    }
    return out;
  });
  define(g, "atob", (s) => {
    s = String(s).replace(/[\t\n\f\r ]/g, "").replace(/={1,2}$/, "");
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) throw new TypeError("atob: the string is not base64");
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

  // ---- URL and URLSearchParams (QuickJS has neither): absolute URLs and references ----------
  // resolved against a base; no IDNA or IPv6 forms beyond what the text already is.

  const formEncode = (s) => encodeURIComponent(s).replace(/%20/g, "+").replace(/[!'()~]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
  const formDecode = (s) => decodeURIComponent(s.replace(/\+/g, " "));
  class URLSearchParams {
    #list = [];
    #onChange;
    constructor(init = "", onChange) {
      this.#onChange = onChange;
      if (typeof init === "string") {
        for (const part of init.replace(/^\?/, "").split("&")) {
          if (part === "") continue;
          const i = part.indexOf("=");
          this.#list.push(i < 0 ? [formDecode(part), ""] : [formDecode(part.slice(0, i)), formDecode(part.slice(i + 1))]);
        }
      } else if (init != null) {
        const pairs = typeof init[Symbol.iterator] === "function" ? init : Object.entries(init);
        for (const [k, v] of pairs) this.#list.push([String(k), String(v)]);
      }
    }
    #changed() { this.#onChange?.(this.toString()); }
    get size() { return this.#list.length; }
    append(k, v) { this.#list.push([String(k), String(v)]); this.#changed(); }
    delete(k) { this.#list = this.#list.filter(([n]) => n !== String(k)); this.#changed(); }
    get(k) { return this.#list.find(([n]) => n === String(k))?.[1] ?? null; }
    getAll(k) { return this.#list.filter(([n]) => n === String(k)).map(([, v]) => v); }
    has(k) { return this.#list.some(([n]) => n === String(k)); }
    set(k, v) {
      k = String(k);
      const i = this.#list.findIndex(([n]) => n === k);
      this.#list = this.#list.filter(([n], j) => n !== k || j === i);
      if (i < 0) this.#list.push([k, String(v)]);
      else this.#list[this.#list.findIndex(([n]) => n === k)] = [k, String(v)];
      this.#changed();
    }
    sort() { this.#list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)); this.#changed(); }
    forEach(fn, thisArg) { for (const [k, v] of this.#list) fn.call(thisArg, v, k, this); }
    *entries() { yield* this.#list.map(([k, v]) => [k, v]); }
    *keys() { for (const [k] of this.#list) yield k; }
    *values() { for (const [, v] of this.#list) yield v; }
    [Symbol.iterator]() { return this.entries(); }
    toString() { return this.#list.map(([k, v]) => formEncode(k) + "=" + formEncode(v)).join("&"); }
  }

  const absoluteURL = /^([a-zA-Z][a-zA-Z0-9+.-]*:)(?:\/\/([^/?#]*))?([^?#]*)(\?[^#]*)?(#.*)?$/;
  const defaultPorts = { "http:": "80", "https:": "443", "ws:": "80", "wss:": "443" };
  const removeDots = (path) => {
    const out = [];
    for (const seg of path.split("/").slice(1)) {
      if (seg === "..") out.pop();
      else if (seg !== ".") out.push(seg);
    }
    const last = path.split("/").pop();
    return "/" + out.join("/") + (last === "." || last === ".." ? (out.length ? "/" : "") : "");
  };
  class URL {
    #p;
    #params;
    constructor(url, base) {
      url = String(url).trim();
      let m = absoluteURL.exec(url);
      if (!m || (m[2] === undefined && base !== undefined && !/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(url))) m = null;
      if (!m) {
        if (base === undefined) throw new TypeError(`Invalid URL: ${url}`);
        const b = new URL(base);
        let path = b.pathname, search = b.search, host = b.host;
        const [rest, hash = ""] = url.split(/#(.*)/s);
        if (url.startsWith("//")) return new URL(b.protocol + url);
        if (rest.startsWith("/")) [path, search] = [rest.replace(/\?.*$/s, ""), rest.includes("?") ? rest.slice(rest.indexOf("?")) : ""];
        else if (rest.startsWith("?")) search = rest;
        else if (rest !== "") {
          const q = rest.indexOf("?");
          const rel = q < 0 ? rest : rest.slice(0, q);
          path = path.replace(/[^/]*$/, "") + rel;
          search = q < 0 ? "" : rest.slice(q);
        }
        m = absoluteURL.exec(`${b.protocol}//${host}${removeDots(path)}${search}${hash ? "#" + hash : url.endsWith("#") ? "#" : ""}`);
      }
      const protocol = m[1].toLowerCase();
      let host = (m[2] ?? "").replace(/^[^@]*@/, "").toLowerCase();
      const port = /:(\d+)$/.exec(host)?.[1] ?? "";
      if (port !== "" && defaultPorts[protocol] === port) host = host.slice(0, -port.length - 1);
      const special = protocol in defaultPorts || protocol === "file:";
      let pathname = m[3] || (special ? "/" : "");
      if (special) pathname = removeDots(pathname.startsWith("/") ? pathname : "/" + pathname);
      this.#p = { protocol, host, pathname, search: m[4] && m[4] !== "?" ? m[4] : "", hash: m[5] && m[5] !== "#" ? m[5] : "" };
    }
    get protocol() { return this.#p.protocol; }
    get host() { return this.#p.host; }
    get hostname() { return this.#p.host.replace(/:\d+$/, ""); }
    get port() { return /:(\d+)$/.exec(this.#p.host)?.[1] ?? ""; }
    get origin() { return this.#p.host ? `${this.#p.protocol}//${this.#p.host}` : "null"; }
    get pathname() { return this.#p.pathname; }
    set pathname(v) { this.#p.pathname = "/" + String(v).replace(/^\//, ""); }
    get search() { return this.#p.search; }
    set search(v) { v = String(v); this.#p.search = v === "" || v === "?" ? "" : v.startsWith("?") ? v : "?" + v; this.#params = undefined; }
    get hash() { return this.#p.hash; }
    set hash(v) { v = String(v); this.#p.hash = v === "" || v === "#" ? "" : v.startsWith("#") ? v : "#" + v; }
    get username() { return ""; }
    get password() { return ""; }
    get searchParams() {
      this.#params ??= new URLSearchParams(this.#p.search, (q) => { this.#p.search = q ? "?" + q : ""; });
      return this.#params;
    }
    get href() { return `${this.#p.protocol}${this.#p.host || this.#p.protocol === "file:" ? "//" : ""}${this.#p.host}${this.#p.pathname}${this.#p.search}${this.#p.hash}`; }
    toString() { return this.href; }
    toJSON() { return this.href; }
    static canParse(url, base) { try { new URL(url, base); return true; } catch { return false; } }
  }
  define(g, "URL", URL);
  define(g, "URLSearchParams", URLSearchParams);

  // ---- timers: due on the sandbox's monotonic clock ------------------------------------------
  // The engine waits for the next timer when nothing else can run (fireTimer returns how long):
  // a real wait on the host's clock, or, for a deterministic step, a jump of the fake clock.

  const monoNow = performance.now.bind(performance);
  let timers = [];
  let timerSeq = 0;
  const addTimer = (fn, delay, args, repeat) => {
    if (typeof fn !== "function") throw new TypeError("setTimeout: the callback must be a function");
    const ms = Math.max(0, Number(delay) || 0);
    const t = { id: ++timerSeq, at: monoNow() + ms, ms, fn, args, repeat };
    timers.push(t);
    return t.id;
  };
  const clearTimer = (id) => {
    timers = timers.filter((t) => t.id !== id);
  };
  define(g, "setTimeout", (fn, delay, ...args) => addTimer(fn, delay, args, false));
  define(g, "setInterval", (fn, delay, ...args) => addTimer(fn, delay, args, true));
  define(g, "clearTimeout", clearTimer);
  define(g, "clearInterval", clearTimer);
  // Runs the next timer if it is due and returns true; when it is not, returns how many
  // milliseconds remain (the engine sleeps that long and asks again); false when there is none
  // (the engine then gives up on the promise).
  function fireTimer() {
    if (timers.length === 0) return false;
    let next = timers[0];
    for (const t of timers) if (t.at < next.at || (t.at === next.at && t.id < next.id)) next = t;
    const wait = next.at - monoNow();
    if (wait > 0) return wait;
    if (next.repeat) next.at += Math.max(1, next.ms);
    else clearTimer(next.id);
    next.fn(...next.args);
    return true;
  }

  // performance.timeOrigin is the wall-clock time performance.now() counts from; the engine's
  // own was read when the snapshot was made, so it is worked out from the clocks of the task.
  define(g, "performance", {
    now: () => monoNow(),
    get timeOrigin() { return Date.now() - monoNow(); },
    toJSON() { return { timeOrigin: this.timeOrigin }; },
  });

  // ---- fetch, through the step's HTTP capability ---------------------------------------------

  class Headers {
    #map = new Map(); // lower-case name -> [name as given, values]
    constructor(init) {
      if (init == null) return;
      const pairs = init instanceof Headers || typeof init[Symbol.iterator] === "function" ? init : Object.entries(init);
      for (const [k, v] of pairs) this.append(k, v);
    }
    append(name, value) {
      const k = String(name).toLowerCase();
      const e = this.#map.get(k);
      if (e) e[1].push(String(value));
      else this.#map.set(k, [String(name), [String(value)]]);
    }
    set(name, value) { this.#map.set(String(name).toLowerCase(), [String(name), [String(value)]]); }
    get(name) {
      const e = this.#map.get(String(name).toLowerCase());
      return e ? e[1].join(", ") : null;
    }
    getSetCookie() { return [...(this.#map.get("set-cookie")?.[1] ?? [])]; }
    has(name) { return this.#map.has(String(name).toLowerCase()); }
    delete(name) { this.#map.delete(String(name).toLowerCase()); }
    *entries() { for (const [k, e] of [...this.#map].sort((a, b) => (a[0] < b[0] ? -1 : 1))) yield [k, e[1].join(", ")]; }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    forEach(fn, thisArg) { for (const [k, v] of this.entries()) fn.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
    // "Name: value" lines, one per value, as the http_request import takes them.
    lines() {
      let out = "";
      for (const [name, values] of this.#map.values()) for (const v of values) out += `${name}: ${v}\n`;
      return out;
    }
  }

  const bodyBytes = (body) => {
    if (body == null) return null;
    if (typeof body === "string") return body;
    if (body instanceof URLSearchParams) return body.toString();
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return toBytes(body).slice();
    if (typeof body === "object" && typeof body.toString === "function" && body.toString !== Object.prototype.toString) return String(body);
    throw new TypeError("fetch: the body must be a string, an ArrayBuffer or a typed array (JSON.stringify objects)");
  };

  class Response {
    #bytes;
    #used = false;
    constructor(body = null, init = {}) {
      const b = bodyBytes(body);
      this.#bytes = b == null ? new Uint8Array(0) : typeof b === "string" ? utf8_encode(b) : b;
      this.status = init.status ?? 200;
      this.statusText = init.statusText ?? "";
      this.headers = init.headers instanceof Headers ? init.headers : new Headers(init.headers);
      this.url = init.url ?? "";
      this.redirected = false;
      this.type = "basic";
    }
    get ok() { return this.status >= 200 && this.status < 300; }
    get bodyUsed() { return this.#used; }
    #take() {
      if (this.#used) throw new TypeError("the response body was already read");
      this.#used = true;
      return this.#bytes;
    }
    async arrayBuffer() { const b = this.#take(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); }
    async bytes() { return this.#take().slice(); }
    async text() { return utf8_decode(this.#take()); }
    async json() { return JSON.parse(await this.text()); }
    clone() {
      if (this.#used) throw new TypeError("the response body was already read");
      return new Response(this.#bytes.slice(), { status: this.status, statusText: this.statusText, headers: new Headers(this.headers), url: this.url });
    }
    static json(data, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
      return new Response(JSON.stringify(data), { ...init, headers });
    }
  }

  // A refused or failed request rejects with a TypeError (as fetch does) whose message is the
  // host's: the same text a handler in any other language fails with. code is the ABI's.
  class FetchError extends TypeError {
    constructor(r) {
      super(r.message);
      this.name = "TypeError";
      this.code = r.code;
    }
  }

  async function fetch(resource, init = {}) {
    init = init ?? {};
    let url = resource;
    let method = init.method;
    let headers = init.headers;
    let body = init.body;
    if (resource !== null && typeof resource === "object" && !(resource instanceof String)) {
      url = resource.url ?? resource.href ?? String(resource);
      method ??= resource.method;
      headers ??= resource.headers;
      body ??= resource.body;
    }
    const h = new Headers(headers);
    if (body instanceof URLSearchParams && !h.has("content-type")) h.set("content-type", "application/x-www-form-urlencoded;charset=UTF-8");
    const r = http(String(method ?? "GET").toUpperCase(), String(url), h.lines(), bodyBytes(body));
    if (r.code !== undefined) throw new FetchError(r);
    const rh = new Headers();
    for (const line of r.headers.split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) rh.append(line.slice(0, i), line.slice(i + 1).trim());
    }
    return new Response(r.body, { status: r.status, headers: rh, url: String(url) });
  }
  define(g, "fetch", fetch);
  define(g, "Headers", Headers);
  define(g, "Response", Response);

  // ---- the handler's ctx ------------------------------------------------------------------

  // Names a runtime asks of any object (await, JSON.stringify, String()): never env lookups.
  const notEnvNames = new Set(["then", "toJSON", "toString", "valueOf", "constructor", "inspect", "asymmetricMatch", "$$typeof", "nodeType"]);
  const env = new Proxy(Object.freeze(Object.create(null)), {
    get(_, name) {
      if (typeof name !== "string" || notEnvNames.has(name)) return undefined;
      const v = config(name);
      if (typeof v === "string") return v;
      if (v.code === -10) return undefined; // listed in env, not set in the worker's environment
      throw new TypeError(v.message);
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

  // ---- ctx.sql: postgres.js's API on the step's SQL capability (sql.js) ----------------------

  const ctxSQL = pgflowSQL(natives);
  // No supabase-js in this engine yet: ctx.supabase says so when read (supabase.js).
  const defineSupabase = pgflowSupabase(undefined);

  const unavailable = (what, instead) =>
    ({ get() { throw new TypeError(`${what} is not available in pgflow-wasm: ${instead} (docs/from-typescript.md)`); }, enumerable: false });
  const neverAborted = Object.freeze({
    aborted: false, reason: undefined, onabort: null,
    addEventListener() {}, removeEventListener() {}, throwIfAborted() {},
  });

  // pgflow 0.12 and later give a root step the flow input and a dependent step only its
  // dependencies' outputs; before, both got {"run": <flow input>, "<dep>": <output>}, which is
  // what the ABI gives every handler (abi/SPEC.md). A map step gets its element in both.
  function atLeast(version, major, minor) {
    if (typeof version !== "string") return false;
    if (version.startsWith("main")) return true;
    const [a, b] = version.split(".").map(Number);
    return a > major || (a === major && b >= minor);
  }
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
    define(ctx, "sql", ctxSQL);
    defineSupabase(ctx, env);
    Object.defineProperty(ctx, "serviceSupabase", unavailable("ctx.serviceSupabase", "call Supabase's HTTP API with fetch and a key from ctx.env"));
    Object.defineProperty(ctx, "anonSupabase", unavailable("ctx.anonSupabase", "call Supabase's HTTP API with fetch and a key from ctx.env"));
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
    async function run(input, c) {
      const out = await handler(...taskOf(input, c));
      const json = JSON.stringify(out);
      return json === undefined ? "null" : json;
    }
    return run;
  }
  return { prepare, describe, fireTimer };
})
