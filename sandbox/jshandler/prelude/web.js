// The fetch family of the web platform (WinterTC's Minimum Common API): Event and
// EventTarget (event-target-shim), AbortController and AbortSignal, Blob, File, FormData,
// Headers, Request, Response and fetch over the step's HTTP capability. Streams are
// web-streams-polyfill's. Nothing here depends on a task: it all goes into the snapshot.
import { Event, EventTarget } from "event-target-shim";
import * as streams from "web-streams-polyfill";

// installWeb puts the globals on g; natives are the engine's (pgflow_js.c), monoNow the
// sandbox's monotonic clock, random(n) n random bytes, setTimeout the prelude's.
export function installWeb(g, define, { http, http_wait, utf8_decode, utf8_encode, monoNow, random, setTimeout, URLSearchParams, toBytes }) {
  // ---- DOMException (QuickJS-NG has none) -------------------------------------------------
  const legacyCodes = {
    IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5, NoModificationAllowedError: 7,
    NotFoundError: 8, NotSupportedError: 9, InvalidStateError: 11, SyntaxError: 12, InvalidModificationError: 13, NamespaceError: 14,
    InvalidAccessError: 15, TypeMismatchError: 17, SecurityError: 18, NetworkError: 19, AbortError: 20, URLMismatchError: 21,
    QuotaExceededError: 22, TimeoutError: 23, InvalidNodeTypeError: 24, DataCloneError: 25,
  };
  class DOMException extends Error {
    #name;
    constructor(message = "", name = "Error") {
      super(String(message));
      this.#name = String(name);
    }
    get name() { return this.#name; }
    get code() { return legacyCodes[this.#name] ?? 0; }
  }
  for (const [name, code] of Object.entries(legacyCodes)) {
    const constant = name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase().replace(/_ERROR$/, "_ERR");
    Object.defineProperty(DOMException, constant, { value: code, enumerable: true });
  }
  define(g, "DOMException", DOMException);

  // ---- events -------------------------------------------------------------------------------
  class CustomEvent extends Event {
    #detail;
    constructor(type, init = {}) {
      super(type, init);
      this.#detail = init?.detail ?? null;
    }
    get detail() { return this.#detail; }
  }
  define(g, "Event", Event);
  define(g, "EventTarget", EventTarget);
  define(g, "CustomEvent", CustomEvent);

  // ---- AbortController and AbortSignal --------------------------------------------------------
  // A fetch's signal stops its request wherever it is: queued, or running on the host (fetch,
  // below). Timers fire while a request runs, so AbortSignal.timeout and a setTimeout that
  // calls abort() cut a request that hangs short.
  const internal = Symbol("internal");
  let signalAbort, signalExpire;
  class AbortSignal extends EventTarget {
    #aborted = false;
    #reason = undefined;
    #deadline = Infinity;
    #onabort = null;
    #dependents = [];
    constructor(key) {
      if (key !== internal) throw new TypeError("Illegal constructor: use new AbortController().signal, AbortSignal.abort(), AbortSignal.timeout() or AbortSignal.any()");
      super();
    }
    get aborted() { return this.#aborted; }
    get reason() { return this.#reason; }
    throwIfAborted() {
      signalExpire(this);
      if (this.#aborted) throw this.#reason;
    }
    get onabort() { return this.#onabort; }
    set onabort(fn) {
      if (this.#onabort) this.removeEventListener("abort", this.#onabort);
      this.#onabort = typeof fn === "function" ? fn : null;
      if (this.#onabort) this.addEventListener("abort", this.#onabort);
    }
    static abort(reason) {
      const s = new AbortSignal(internal);
      signalAbort(s, reason);
      return s;
    }
    static timeout(ms) {
      ms = Number(ms);
      if (!(ms >= 0)) throw new TypeError("AbortSignal.timeout: the delay must be a number of milliseconds, 0 or more");
      const s = new AbortSignal(internal);
      s.#deadline = monoNow() + ms;
      setTimeout(() => signalExpire(s), ms);
      return s;
    }
    static any(signals) {
      const s = new AbortSignal(internal);
      for (const x of signals) {
        if (!(x instanceof AbortSignal)) throw new TypeError("AbortSignal.any: every element must be an AbortSignal");
        if (x.#aborted) {
          signalAbort(s, x.#reason);
          return s;
        }
        s.#deadline = Math.min(s.#deadline, x.#deadline);
        x.#dependents.push(new WeakRef(s));
      }
      return s;
    }
    get [Symbol.toStringTag]() { return "AbortSignal"; }
    static {
      signalAbort = (s, reason = new DOMException("This operation was aborted", "AbortError")) => {
        if (s.#aborted) return;
        s.#aborted = true;
        s.#reason = reason;
        s.dispatchEvent(new Event("abort"));
        for (const ref of s.#dependents.splice(0)) {
          const d = ref.deref();
          if (d) signalAbort(d, reason);
        }
      };
      // A timeout due by now aborts, even when its timer has not had its turn yet.
      signalExpire = (s) => {
        if (!s.#aborted && s.#deadline <= monoNow()) signalAbort(s, new DOMException("The operation timed out.", "TimeoutError"));
      };
    }
  }
  class AbortController {
    #signal = new AbortSignal(internal);
    get signal() { return this.#signal; }
    abort(reason) { signalAbort(this.#signal, reason); }
  }
  define(g, "AbortSignal", AbortSignal);
  define(g, "AbortController", AbortController);

  // ---- Blob, File, FormData ---------------------------------------------------------------------
  const concat = (chunks) => {
    let n = 0;
    for (const c of chunks) n += c.byteLength;
    const out = new Uint8Array(n);
    let at = 0;
    for (const c of chunks) {
      out.set(c, at);
      at += c.byteLength;
    }
    return out;
  };
  let blobBytes;
  class Blob {
    #bytes;
    #type;
    constructor(parts = [], options = {}) {
      if (parts == null || typeof parts[Symbol.iterator] !== "function") throw new TypeError("Blob: the parts must be an iterable (an array of strings, buffers or blobs)");
      const chunks = [];
      for (const p of parts) {
        if (p instanceof Blob) chunks.push(p.#bytes);
        else if (p instanceof ArrayBuffer || ArrayBuffer.isView(p)) chunks.push(toBytes(p));
        else chunks.push(utf8_encode(String(p)));
      }
      this.#bytes = concat(chunks);
      const type = String(options?.type ?? "");
      this.#type = /^[\x20-\x7e]*$/.test(type) ? type.toLowerCase() : "";
    }
    get size() { return this.#bytes.byteLength; }
    get type() { return this.#type; }
    slice(start = 0, end = this.size, type = "") {
      const n = this.size;
      const at = (i) => (i < 0 ? Math.max(n + i, 0) : Math.min(i, n));
      const b = new Blob([], { type });
      b.#bytes = this.#bytes.slice(at(Math.trunc(start) || 0), at(Math.trunc(end) || 0));
      return b;
    }
    async text() { return utf8_decode(this.#bytes); }
    async arrayBuffer() { return this.#bytes.slice().buffer; }
    async bytes() { return this.#bytes.slice(); }
    stream() { return bytesStream(this.#bytes); }
    get [Symbol.toStringTag]() { return "Blob"; }
    static {
      blobBytes = (b) => b.#bytes;
    }
  }
  class File extends Blob {
    #name;
    #lastModified;
    constructor(bits, name, options = {}) {
      if (arguments.length < 2) throw new TypeError("File: a name is required (new File(parts, name, options))");
      super(bits, options);
      this.#name = String(name);
      this.#lastModified = options?.lastModified === undefined ? Date.now() : Number(options.lastModified);
    }
    get name() { return this.#name; }
    get lastModified() { return this.#lastModified; }
    get webkitRelativePath() { return ""; }
    get [Symbol.toStringTag]() { return "File"; }
  }
  define(g, "Blob", Blob);
  define(g, "File", File);

  let formEntries;
  class FormData {
    #list = [];
    constructor(form) {
      if (form !== undefined) throw new TypeError("FormData: there are no HTML forms here: build it with append()");
    }
    #entry(name, value, filename) {
      if (value instanceof Blob) {
        if (!(value instanceof File) || filename !== undefined) {
          value = new File([value], filename !== undefined ? String(filename) : value instanceof File ? value.name : "blob", { type: value.type, lastModified: value instanceof File ? value.lastModified : undefined });
        }
      } else value = String(value);
      return [String(name), value];
    }
    append(name, value, filename) { this.#list.push(this.#entry(name, value, filename)); }
    set(name, value, filename) {
      const e = this.#entry(name, value, filename);
      const i = this.#list.findIndex(([n]) => n === e[0]);
      if (i < 0) return void this.#list.push(e);
      this.#list = this.#list.filter(([n], j) => n !== e[0] || j === i);
      this.#list[i] = e;
    }
    get(name) { return this.#list.find(([n]) => n === String(name))?.[1] ?? null; }
    getAll(name) { return this.#list.filter(([n]) => n === String(name)).map(([, v]) => v); }
    has(name) { return this.#list.some(([n]) => n === String(name)); }
    delete(name) { this.#list = this.#list.filter(([n]) => n !== String(name)); }
    *entries() { for (const [k, v] of this.#list) yield [k, v]; }
    *keys() { for (const [k] of this.#list) yield k; }
    *values() { for (const [, v] of this.#list) yield v; }
    forEach(fn, thisArg) { for (const [k, v] of this.#list) fn.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
    get [Symbol.toStringTag]() { return "FormData"; }
    static {
      formEntries = (f) => f.#list;
    }
  }
  define(g, "FormData", FormData);

  // multipart/form-data as browsers write it (RFC 7578): names and file names escape CR, LF and ".
  const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  function multipart(form) {
    const boundary = "----formdata-pgflow-" + hex(random(12));
    const esc = (s) => s.replace(/\r/g, "%0D").replace(/\n/g, "%0A").replace(/"/g, "%22");
    const chunks = [];
    for (const [name, value] of formEntries(form)) {
      let head = `--${boundary}\r\nContent-Disposition: form-data; name="${esc(name)}"`;
      if (typeof value === "string") {
        chunks.push(utf8_encode(head + "\r\n\r\n" + value.replace(/\r(?!\n)|(?<!\r)\n/g, "\r\n") + "\r\n"));
      } else {
        head += `; filename="${esc(value.name)}"\r\nContent-Type: ${value.type || "application/octet-stream"}\r\n\r\n`;
        chunks.push(utf8_encode(head), blobBytes(value), utf8_encode("\r\n"));
      }
    }
    chunks.push(utf8_encode(`--${boundary}--\r\n`));
    return { bytes: concat(chunks), type: `multipart/form-data; boundary=${boundary}` };
  }

  // ---- streams (web-streams-polyfill) ---------------------------------------------------------
  const { ReadableStream, TransformStream } = streams;
  for (const name of ["ReadableStream", "ReadableStreamDefaultReader", "ReadableStreamBYOBReader", "ReadableStreamDefaultController",
    "ReadableByteStreamController", "ReadableStreamBYOBRequest", "WritableStream", "WritableStreamDefaultWriter",
    "WritableStreamDefaultController", "TransformStream", "TransformStreamDefaultController", "ByteLengthQueuingStrategy", "CountQueuingStrategy"]) {
    if (streams[name]) define(g, name, streams[name]);
  }
  class TextEncoderStream extends TransformStream {
    constructor() {
      const e = new g.TextEncoder();
      super({ transform(chunk, c) { c.enqueue(e.encode(String(chunk))); } });
    }
    get encoding() { return "utf-8"; }
  }
  class TextDecoderStream extends TransformStream {
    constructor(label = "utf-8", options = {}) {
      const d = new g.TextDecoder(label, options);
      super({
        transform(chunk, c) {
          const s = d.decode(chunk, { stream: true });
          if (s) c.enqueue(s);
        },
        flush(c) {
          const s = d.decode();
          if (s) c.enqueue(s);
        },
      });
    }
    get encoding() { return "utf-8"; }
  }
  define(g, "TextEncoderStream", TextEncoderStream);
  define(g, "TextDecoderStream", TextDecoderStream);

  // ---- bodies -----------------------------------------------------------------------------------
  function bytesStream(bytes) {
    return new ReadableStream({
      start(c) {
        if (bytes.byteLength > 0) c.enqueue(bytes.slice());
        c.close();
      },
    });
  }
  async function readAll(stream) {
    const reader = stream.getReader();
    const chunks = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!(value instanceof Uint8Array)) throw new TypeError("a body stream must give Uint8Array chunks");
      chunks.push(value);
    }
    return concat(chunks);
  }
  // {bytes, stream, type}: what a body init becomes, with the content type it implies.
  function extractBody(body) {
    if (body == null) return { bytes: null, stream: null, type: null };
    if (typeof body === "string") return { bytes: utf8_encode(body), stream: null, type: "text/plain;charset=UTF-8" };
    if (body instanceof URLSearchParams) return { bytes: utf8_encode(body.toString()), stream: null, type: "application/x-www-form-urlencoded;charset=UTF-8" };
    if (body instanceof Blob) return { bytes: blobBytes(body), stream: null, type: body.type || null };
    if (body instanceof FormData) return { ...multipart(body), stream: null };
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return { bytes: toBytes(body).slice(), stream: null, type: null };
    if (body instanceof ReadableStream) return { bytes: null, stream: body, type: null };
    if (typeof body[Symbol.asyncIterator] === "function") return { bytes: null, stream: ReadableStream.from(body), type: null };
    return { bytes: utf8_encode(String(body)), stream: null, type: "text/plain;charset=UTF-8" };
  }

  let bodyInit, bodyConsume, bodyClone;
  class Body {
    #src = { bytes: null, stream: null };
    #used = false;
    get body() {
      if (this.#src.stream === null && this.#src.bytes === null) return null;
      this.#src.stream ??= bytesStream(this.#src.bytes);
      return this.#src.stream;
    }
    get bodyUsed() { return this.#used; }
    async arrayBuffer() { return (await bodyConsume(this)).buffer; }
    async bytes() { return await bodyConsume(this); }
    async text() {
      const b = await bodyConsume(this);
      return utf8_decode(b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf ? b.subarray(3) : b);
    }
    async json() { return JSON.parse(await this.text()); }
    async blob() { return new Blob([await bodyConsume(this)], { type: this.headers.get("content-type") ?? "" }); }
    async formData() {
      const type = this.headers.get("content-type") ?? "";
      if (!/^application\/x-www-form-urlencoded/i.test(type)) throw new TypeError(`formData(): only application/x-www-form-urlencoded bodies are read here, not ${type || "a body without a content type"}`);
      const f = new FormData();
      for (const [k, v] of new URLSearchParams(await this.text())) f.append(k, v);
      return f;
    }
    static {
      bodyInit = (o, body, headers) => {
        const x = extractBody(body);
        o.#src = { bytes: x.bytes, stream: x.stream };
        if (x.type !== null && !headers.has("content-type")) headers.set("content-type", x.type);
      };
      bodyConsume = async (o) => {
        if (o.#used) throw new TypeError("the body was already read: read it once, or clone() first");
        o.#used = true;
        if (o.#src.stream !== null) return await readAll(o.#src.stream);
        return o.#src.bytes === null ? new Uint8Array(0) : o.#src.bytes.slice();
      };
      bodyClone = (from, to) => {
        if (from.#used) throw new TypeError("the body was already read: clone() before reading it");
        if (from.#src.stream !== null) {
          const [a, b] = from.#src.stream.tee();
          from.#src = { bytes: null, stream: a };
          to.#src = { bytes: null, stream: b };
        } else to.#src = { bytes: from.#src.bytes, stream: null };
      };
    }
  }

  // ---- Headers ------------------------------------------------------------------------------------
  const tokenRE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  const headerName = (name) => {
    name = String(name);
    if (!tokenRE.test(name)) throw new TypeError(`Headers: "${name}" is not a valid header name`);
    return name.toLowerCase();
  };
  const headerValue = (value) => {
    value = String(value).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
    if (/[\0\r\n]/.test(value)) throw new TypeError("Headers: a header value may not contain NUL, CR or LF");
    return value;
  };
  class Headers {
    #map = new Map(); // lower-case name -> values
    constructor(init) {
      if (init == null) return;
      if (typeof init !== "object" && typeof init !== "function") throw new TypeError("Headers: init must be an object, an array of pairs or a Headers");
      if (init instanceof Headers || typeof init[Symbol.iterator] === "function") {
        for (const pair of init) {
          const p = [...pair];
          if (p.length !== 2) throw new TypeError("Headers: each pair must have a name and a value");
          this.append(p[0], p[1]);
        }
      } else for (const k of Object.keys(init)) this.append(k, init[k]);
    }
    append(name, value) {
      const k = headerName(name);
      const v = headerValue(value);
      const e = this.#map.get(k);
      if (e) e.push(v);
      else this.#map.set(k, [v]);
    }
    set(name, value) { this.#map.set(headerName(name), [headerValue(value)]); }
    get(name) {
      const e = this.#map.get(headerName(name));
      return e ? e.join(", ") : null;
    }
    getSetCookie() { return [...(this.#map.get("set-cookie") ?? [])]; }
    has(name) { return this.#map.has(headerName(name)); }
    delete(name) { this.#map.delete(headerName(name)); }
    *entries() {
      for (const k of [...this.#map.keys()].sort()) {
        if (k === "set-cookie") for (const v of this.#map.get(k)) yield [k, v];
        else yield [k, this.#map.get(k).join(", ")];
      }
    }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    forEach(fn, thisArg) { for (const [k, v] of this.entries()) fn.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
    get [Symbol.toStringTag]() { return "Headers"; }
    // "Name: value" lines, one per value, as the http_request import takes them.
    static lines(h, skip) {
      let out = "";
      for (const [name, values] of h.#map) if (!skip(name)) for (const v of values) out += `${name}: ${v}\n`;
      return out;
    }
  }
  const headerLines = Headers.lines;
  delete Headers.lines;
  define(g, "Headers", Headers);

  // A request's own signal follows the one given: ours, or another library's AbortSignal
  // (an SDK may bring its own AbortController), by its abort event.
  function followSignal(s) {
    if (s == null) return new AbortController().signal;
    if (s instanceof AbortSignal) return AbortSignal.any([s]);
    if (typeof s.aborted !== "boolean" || typeof s.addEventListener !== "function") throw new TypeError("Request: signal must be an AbortSignal");
    const c = new AbortController();
    if (s.aborted) c.abort(s.reason);
    else s.addEventListener("abort", () => c.abort(s.reason));
    return c.signal;
  }

  // ---- Request and Response -------------------------------------------------------------------------
  const methods = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"];
  class Request extends Body {
    #url;
    #method;
    #headers;
    #signal;
    #init;
    constructor(input, init = {}) {
      super();
      init = init ?? {};
      const from = input instanceof Request ? input : null;
      let url;
      if (from) url = from.#url;
      else {
        try {
          url = new g.URL(String(input)).href;
        } catch {
          throw new TypeError(`Request: "${String(input)}" is not an absolute URL (there is no page here to resolve it against)`);
        }
      }
      let method = init.method ?? from?.#method ?? "GET";
      method = String(method);
      if (!tokenRE.test(method)) throw new TypeError(`Request: "${method}" is not a valid method`);
      if (methods.includes(method.toUpperCase())) method = method.toUpperCase();
      if (["CONNECT", "TRACE", "TRACK"].includes(method.toUpperCase())) throw new TypeError(`Request: the ${method} method is forbidden`);
      this.#url = url;
      this.#method = method;
      this.#headers = new Headers(init.headers ?? from?.#headers);
      this.#signal = followSignal(init.signal ?? from?.#signal);
      this.#init = {
        redirect: init.redirect ?? from?.redirect ?? "follow", credentials: init.credentials ?? from?.credentials ?? "same-origin",
        mode: init.mode ?? from?.mode ?? "cors", cache: init.cache ?? from?.cache ?? "default", referrer: init.referrer ?? from?.referrer ?? "about:client",
        referrerPolicy: init.referrerPolicy ?? from?.referrerPolicy ?? "", integrity: init.integrity ?? from?.integrity ?? "",
        keepalive: Boolean(init.keepalive ?? from?.keepalive ?? false), duplex: init.duplex ?? "half",
      };
      const body = init.body !== undefined ? init.body : null;
      if (body !== null && (method === "GET" || method === "HEAD")) throw new TypeError(`Request: a ${method} request cannot have a body`);
      if (body !== null) bodyInit(this, body, this.#headers);
      else if (from && from.body !== null) bodyClone(from, this);
    }
    get url() { return this.#url; }
    get method() { return this.#method; }
    get headers() { return this.#headers; }
    get signal() { return this.#signal; }
    get redirect() { return this.#init.redirect; }
    get credentials() { return this.#init.credentials; }
    get mode() { return this.#init.mode; }
    get cache() { return this.#init.cache; }
    get referrer() { return this.#init.referrer; }
    get referrerPolicy() { return this.#init.referrerPolicy; }
    get integrity() { return this.#init.integrity; }
    get keepalive() { return this.#init.keepalive; }
    get destination() { return ""; }
    get duplex() { return this.#init.duplex; }
    clone() {
      const r = new Request(this.#url, { method: this.#method, headers: this.#headers, signal: this.#signal, ...this.#init });
      bodyClone(this, r);
      return r;
    }
    get [Symbol.toStringTag]() { return "Request"; }
  }

  const nullBodyStatus = [101, 103, 204, 205, 304];
  let responseInit;
  class Response extends Body {
    #status = 200;
    #statusText = "";
    #headers;
    #url = "";
    #type = "default";
    #redirected = false;
    constructor(body = null, init = {}) {
      super();
      init = init ?? {};
      const status = init.status === undefined ? 200 : Number(init.status);
      if (!Number.isInteger(status) || status < 200 || status > 599) throw new RangeError(`Response: status ${init.status} is outside 200-599`);
      if (body !== null && nullBodyStatus.includes(status)) throw new TypeError(`Response: a ${status} response cannot have a body`);
      this.#status = status;
      this.#statusText = String(init.statusText ?? "");
      this.#headers = new Headers(init.headers);
      if (body !== null) bodyInit(this, body, this.#headers);
    }
    get ok() { return this.#status >= 200 && this.#status < 300; }
    get status() { return this.#status; }
    get statusText() { return this.#statusText; }
    get headers() { return this.#headers; }
    get url() { return this.#url; }
    get type() { return this.#type; }
    get redirected() { return this.#redirected; }
    clone() {
      const r = new Response(null, { status: 200 });
      r.#status = this.#status;
      r.#statusText = this.#statusText;
      r.#headers = new Headers(this.#headers);
      r.#url = this.#url;
      r.#type = this.#type;
      r.#redirected = this.#redirected;
      bodyClone(this, r);
      return r;
    }
    static json(data, init = {}) {
      const text = JSON.stringify(data);
      if (text === undefined) throw new TypeError("Response.json: the value cannot be written as JSON");
      const headers = new Headers(init?.headers);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
      return new Response(text, { ...init, headers });
    }
    static error() {
      const r = new Response(null, { status: 200 });
      r.#status = 0;
      r.#type = "error";
      return r;
    }
    static redirect(url, status = 302) {
      if (![301, 302, 303, 307, 308].includes(status)) throw new RangeError(`Response.redirect: ${status} is not a redirect status`);
      return new Response(null, { status, headers: { location: new g.URL(String(url)).href } });
    }
    get [Symbol.toStringTag]() { return "Response"; }
    static {
      responseInit = (r, { status, url, body }) => {
        r.#status = status;
        r.#url = url;
        r.#type = "basic";
        bodyInit(r, body, r.#headers);
      };
    }
  }
  define(g, "Request", Request);
  define(g, "Response", Response);

  // A refused or failed request rejects with a TypeError (as fetch does) whose message is the
  // host's: the same text a handler in any other language fails with. code is the ABI's.
  class FetchError extends TypeError {
    constructor(r) {
      super(r.message);
      this.name = "TypeError";
      this.code = r.code;
    }
  }
  // The headers the worker sets itself, which the host refuses from a handler: fetch leaves
  // them out, as the Fetch standard has it ignore its forbidden request-headers, so an SDK
  // that sets its own Content-Length (stripe's) works.
  const workerSet = new Set(["host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade"]);
  const setByWorker = (name) => workerSet.has(name.toLowerCase()) || name.toLowerCase().startsWith("proxy-");

  // One request runs on the host at a time (http starts it and returns at once); the others
  // wait their turn in the queue. While one runs, the engine's loop drains the job queue and
  // then waits for it until the next timer is due (waitRequest, from fireTimer). A signal that
  // aborts takes its request out of the queue, or has the host stop it and close its
  // connection (http_wait with cancel).
  const queue = [];
  let running = null;
  function settleRequest(job, r) {
    if (running === job) running = null;
    job.signal.removeEventListener("abort", job.onAbort);
    if (r.code !== undefined) job.reject(new FetchError(r));
    else job.resolve(r);
  }
  function startNext() {
    while (running === null && queue.length > 0) {
      const job = queue.shift();
      running = job;
      let r;
      try {
        r = http(...job.args, 0);
      } catch (e) {
        running = null;
        job.signal.removeEventListener("abort", job.onAbort);
        job.reject(e);
        continue;
      }
      if (r !== null) settleRequest(job, r);
    }
  }
  function abortRequest(job) {
    if (running === job) {
      http_wait(0, true);
      running = null;
    } else {
      const i = queue.indexOf(job);
      if (i < 0) return;
      queue.splice(i, 1);
    }
    job.signal.removeEventListener("abort", job.onAbort);
    job.reject(job.signal.reason);
    startNext();
  }
  function send(args, signal) {
    return new Promise((resolve, reject) => {
      const job = { args, signal, resolve, reject, onAbort: null };
      job.onAbort = () => abortRequest(job);
      signal.addEventListener("abort", job.onAbort);
      queue.push(job);
      startNext();
    });
  }
  // waitRequest waits for the running request at most ms milliseconds (negative: until it
  // ends); it returns false when none runs.
  function waitRequest(ms) {
    if (running === null) return false;
    const r = http_wait(ms, false);
    if (r !== null) {
      settleRequest(running, r);
      startNext();
    }
    return true;
  }

  async function fetch(input, init = undefined) {
    const req = new Request(input, init);
    const signal = req.signal;
    signal.throwIfAborted();
    const body = req.body === null ? null : await req.bytes();
    signal.throwIfAborted();
    const r = await send([req.method, req.url, headerLines(req.headers, setByWorker), body], signal);
    const headers = new Headers();
    for (const line of r.headers.split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) headers.append(line.slice(0, i), line.slice(i + 1).trim());
    }
    const res = new Response(null, { headers });
    responseInit(res, { status: r.status, url: req.url, body: nullBodyStatus.includes(r.status) || req.method === "HEAD" ? null : r.body });
    return res;
  }
  define(g, "fetch", fetch);

  // WebSocket exists, as in Deno, so libraries that look for it at start-up (supabase-js's
  // realtime client) load; a connection is refused, clearly, when one is opened: a task
  // reaches the network only through its step's http grant, one request at a time.
  class WebSocket extends EventTarget {
    static CONNECTING = 0;
    static OPEN = 1;
    static CLOSING = 2;
    static CLOSED = 3;
    constructor(url) {
      super();
      throw new DOMException(`WebSocket: connections are not available in pgflow-wasm's sandbox (${String(url)}): a task reaches the network only through fetch and its step's http grant`, "NotSupportedError");
    }
  }
  define(g, "WebSocket", WebSocket);
  return { DOMException, Blob, File, FormData, AbortSignal, blobBytes, waitRequest };
}
