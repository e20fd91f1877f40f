// The Node built-ins a handler may import (as node:buffer, node:events, node:util and
// node:crypto, as Supabase's Deno runtime offers them): buffer and events are the npm packages
// browsers use for them; util and crypto are the parts handlers use, on the host's crypto.
import { Buffer } from "buffer";
import EventEmitter from "events";

export function makeNode({ show, call, b64, unb64, random, randomUUID, TextEncoder, TextDecoder, subtle, getRandomValues, CryptoKey }) {
  // ---- util ------------------------------------------------------------------------------------
  function format(f, ...args) {
    if (typeof f !== "string") return [f, ...args].map((x) => (typeof x === "string" ? x : inspect(x))).join(" ");
    let i = 0;
    let out = f.replace(/%[sdifjoOc%]/g, (m) => {
      if (m === "%%") return "%";
      if (i >= args.length) return m;
      const a = args[i++];
      switch (m) {
        case "%s": return typeof a === "string" ? a : typeof a === "bigint" ? `${a}n` : typeof a === "object" && a !== null ? inspect(a) : String(a);
        case "%d": return typeof a === "bigint" ? `${a}n` : String(Number(a));
        case "%i": return typeof a === "bigint" ? `${a}n` : String(parseInt(a));
        case "%f": return String(parseFloat(a));
        case "%j": try { return JSON.stringify(a); } catch { return "[Circular]"; }
        case "%c": return "";
        default: return inspect(a);
      }
    });
    for (; i < args.length; i++) out += " " + (typeof args[i] === "string" ? args[i] : inspect(args[i]));
    return out;
  }
  function inspect(v) {
    if (typeof v === "string") return `'${v}'`;
    return show(v);
  }
  const custom = Symbol.for("nodejs.util.promisify.custom");
  function promisify(fn) {
    if (typeof fn !== "function") throw new TypeError("util.promisify: the argument must be a function");
    if (typeof fn[custom] === "function") return fn[custom];
    return function (...args) {
      return new Promise((resolve, reject) => fn.call(this, ...args, (err, value) => (err ? reject(err) : resolve(value))));
    };
  }
  promisify.custom = custom;
  function callbackify(fn) {
    return function (...args) {
      const cb = args.pop();
      fn.apply(this, args).then((v) => cb(null, v), (e) => cb(e || new Error("the promise was rejected with a falsy value")));
    };
  }
  const tag = (v) => Object.prototype.toString.call(v).slice(8, -1);
  const types = {
    isDate: (v) => v instanceof Date, isRegExp: (v) => v instanceof RegExp, isPromise: (v) => v instanceof Promise,
    isMap: (v) => v instanceof Map, isSet: (v) => v instanceof Set, isTypedArray: (v) => ArrayBuffer.isView(v) && !(v instanceof DataView),
    isUint8Array: (v) => v instanceof Uint8Array, isArrayBuffer: (v) => v instanceof ArrayBuffer, isAnyArrayBuffer: (v) => v instanceof ArrayBuffer,
    isArrayBufferView: (v) => ArrayBuffer.isView(v), isAsyncFunction: (v) => tag(v) === "AsyncFunction",
    isGeneratorFunction: (v) => tag(v) === "GeneratorFunction" || tag(v) === "AsyncGeneratorFunction", isNativeError: (v) => v instanceof Error,
    isBoxedPrimitive: (v) => v instanceof Number || v instanceof String || v instanceof Boolean, isWeakMap: (v) => v instanceof WeakMap,
    isWeakSet: (v) => v instanceof WeakSet, isDataView: (v) => v instanceof DataView, isCryptoKey: (v) => v instanceof CryptoKey,
  };
  function isDeepStrictEqual(a, b) {
    if (Object.is(a, b)) return true;
    if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
    if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
    if (a instanceof Date) return a.getTime() === b.getTime();
    if (a instanceof Map || a instanceof Set) return isDeepStrictEqual([...a], [...b]);
    const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);
    return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && isDeepStrictEqual(a[k], b[k]));
  }
  const util = {
    format, inspect, promisify, callbackify, types, isDeepStrictEqual, TextEncoder, TextDecoder,
    inherits(ctor, superCtor) {
      Object.defineProperty(ctor, "super_", { value: superCtor, writable: true, configurable: true });
      Object.setPrototypeOf(ctor.prototype, superCtor.prototype);
    },
    deprecate: (fn) => fn,
    debuglog: () => () => {},
    isArray: Array.isArray,
    toUSVString: (s) => String(s).toWellFormed(),
    stripVTControlCharacters: (s) => String(s).replace(/\x1b\[[0-9;]*[A-Za-z]/g, ""),
  };

  // ---- crypto ------------------------------------------------------------------------------------
  const hashNames = { md5: "MD5", sha1: "SHA-1", "sha-1": "SHA-1", sha256: "SHA-256", "sha-256": "SHA-256", sha384: "SHA-384", "sha-384": "SHA-384", sha512: "SHA-512", "sha-512": "SHA-512" };
  const hashName = (alg) => {
    const h = hashNames[String(alg).toLowerCase()];
    if (!h) throw new Error(`crypto: digest ${alg} is not supported here (md5, sha1, sha256, sha384, sha512 are)`);
    return h;
  };
  const input = (data, enc) => (typeof data === "string" ? Buffer.from(data, enc ?? "utf8") : Buffer.from(data.buffer ?? data, data.byteOffset ?? 0, data.byteLength));
  const output = (bytes, enc) => {
    const b = Buffer.from(bytes);
    return enc === undefined || enc === "buffer" ? b : b.toString(enc);
  };
  class Hash {
    #alg;
    #key;
    #chunks = [];
    #done = false;
    constructor(alg, key) {
      this.#alg = hashName(alg);
      this.#key = key;
    }
    update(data, enc) {
      if (this.#done) throw new Error("crypto: update() after digest()");
      this.#chunks.push(input(data, enc));
      return this;
    }
    digest(enc) {
      if (this.#done) throw new Error("crypto: digest() was already called");
      this.#done = true;
      const data = b64(Buffer.concat(this.#chunks));
      const r = this.#key === undefined
        ? call({ op: "digest", hash: this.#alg, data, legacy: true })
        : call({ op: "hmac", hash: this.#alg, key: b64(this.#key), data, legacy: true });
      return output(unb64(r.data), enc);
    }
    copy() {
      const h = new Hash(this.#alg, this.#key);
      for (const c of this.#chunks) h.update(c);
      return h;
    }
  }
  const crypto = {
    createHash: (alg) => new Hash(alg),
    createHmac: (alg, key) => new Hash(alg, typeof key === "string" ? Buffer.from(key) : key?.export ? key.export() : input(key)),
    hash: (alg, data, enc = "hex") => new Hash(alg).update(data).digest(enc),
    randomBytes(n, cb) {
      const b = Buffer.alloc(n);
      for (let at = 0; at < n; at += 65536) b.set(random(Math.min(65536, n - at)), at);
      if (typeof cb === "function") queueMicrotask(() => cb(null, b));
      return b;
    },
    randomInt(min, max, cb) {
      if (max === undefined || typeof max === "function") [min, max, cb] = [0, min, max];
      const range = max - min;
      const bytes = random(6);
      let n = 0;
      for (const x of bytes) n = n * 256 + x;
      const v = min + (n % range);
      if (typeof cb === "function") queueMicrotask(() => cb(null, v));
      return v;
    },
    randomUUID,
    getRandomValues,
    randomFillSync(buf, offset = 0, size) {
      const view = new Uint8Array(buf.buffer ?? buf, (buf.byteOffset ?? 0) + offset, size ?? (buf.byteLength - offset));
      for (let at = 0; at < view.length; at += 65536) view.set(random(Math.min(65536, view.length - at)), at);
      return buf;
    },
    timingSafeEqual(a, b) {
      if (a.byteLength !== b.byteLength) throw new RangeError("crypto.timingSafeEqual: the inputs must have the same length");
      const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength), y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
      let d = 0;
      for (let i = 0; i < x.length; i++) d |= x[i] ^ y[i];
      return d === 0;
    },
    getHashes: () => ["md5", "sha1", "sha256", "sha384", "sha512"],
    webcrypto: { subtle, getRandomValues, randomUUID },
    subtle,
  };

  const modules = { buffer: { Buffer, default: undefined }, events: EventEmitter, util, crypto };
  modules.buffer = { Buffer, kMaxLength: 2 ** 31 - 1, constants: { MAX_LENGTH: 2 ** 31 - 1 }, atob: globalThis.atob, btoa: globalThis.btoa, Blob: globalThis.Blob, File: globalThis.File };
  return { Buffer, modules };
}
