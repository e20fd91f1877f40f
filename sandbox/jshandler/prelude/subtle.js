// crypto.subtle over the host's compute_call (Go's crypto/*, sandbox/compute): the guest
// keeps a key as its JWK and hands it to the host with every operation; the host reads no
// file and no network for it. Requests and results are JSON, bytes in standard base64.
import { fromByteArray, toByteArray } from "base64-js";

export function makeSubtle({ compute_call, toBytes, DOMException }) {
  const b64 = (data) => fromByteArray(toBytes(data));
  const unb64 = (s) => toByteArray(s);
  const ab = (s) => {
    const b = unb64(s);
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  };

  // call(req): the host's JSON answer, or a DOMException named by the host ("DataError: ...").
  function call(req) {
    const r = compute_call(JSON.stringify(req));
    if (typeof r === "string") return JSON.parse(r);
    const m = /^([A-Za-z]+Error): ([\s\S]*)$/.exec(r.message);
    throw m ? new DOMException(m[2], m[1]) : new DOMException(r.message, "OperationError");
  }

  const names = ["SHA-1", "SHA-256", "SHA-384", "SHA-512", "HMAC", "RSASSA-PKCS1-v1_5", "RSA-PSS", "RSA-OAEP", "ECDSA", "ECDH", "AES-GCM", "AES-CBC", "AES-CTR", "AES-KW", "Ed25519", "X25519", "HKDF", "PBKDF2"];
  const canonical = (n) => names.find((x) => x.toLowerCase() === String(n).toLowerCase()) ?? String(n);
  const hashOf = (h) => (h === undefined ? undefined : canonical(typeof h === "string" ? h : h?.name));
  function algorithm(a) {
    const o = typeof a === "string" ? { name: a } : { ...a };
    if (typeof o.name !== "string") throw new TypeError("crypto.subtle: the algorithm must be a name or an object with a name");
    o.name = canonical(o.name);
    if (o.hash !== undefined) o.hash = hashOf(o.hash);
    for (const k of ["iv", "additionalData", "counter", "salt", "info", "label", "publicExponent"]) if (o[k] !== undefined) o[k] = b64(o[k]);
    if (o.public !== undefined) o.public = o.public instanceof CryptoKey ? jwkOf(o.public) : o.public;
    return o;
  }

  let jwkOf, makeKey;
  const token = Symbol("CryptoKey");
  class CryptoKey {
    #jwk;
    #type;
    #extractable;
    #algorithm;
    #usages;
    constructor(t) {
      if (t !== token) throw new TypeError("Illegal constructor: keys come from crypto.subtle.importKey or generateKey");
    }
    get type() { return this.#type; }
    get extractable() { return this.#extractable; }
    get algorithm() { return this.#algorithm; }
    get usages() { return [...this.#usages]; }
    get [Symbol.toStringTag]() { return "CryptoKey"; }
    static {
      jwkOf = (k) => {
        if (!(k instanceof CryptoKey)) throw new TypeError("crypto.subtle: the key must be a CryptoKey");
        return k.#jwk;
      };
      // r is the host's {jwk, type, alg}; usages those asked for that suit the key's type.
      makeKey = (r, extractable, usages) => {
        const k = new CryptoKey(token);
        k.#jwk = r.jwk;
        k.#type = r.type;
        k.#extractable = r.type === "public" ? true : Boolean(extractable);
        const alg = { ...r.alg };
        if (alg.hash !== undefined) alg.hash = { name: alg.hash };
        if (alg.publicExponent !== undefined) alg.publicExponent = unb64(alg.publicExponent);
        k.#algorithm = Object.freeze(alg);
        const allowed = r.type === "public" ? ["verify", "encrypt", "wrapKey"] : r.type === "private" ? ["sign", "decrypt", "unwrapKey", "deriveKey", "deriveBits"] : null;
        k.#usages = Object.freeze([...usages].map(String).filter((u) => allowed === null || allowed.includes(u)));
        return k;
      };
    }
  }
  const need = (key, usage) => {
    jwkOf(key);
    if (!key.usages.includes(usage)) throw new DOMException(`the key's usages (${key.usages.join(", ") || "none"}) do not include "${usage}"`, "InvalidAccessError");
  };
  // Each method is async as the standard's are: a bad argument rejects, it never throws.
  const subtle = {
    async digest(alg, data) {
      return ab(call({ op: "digest", hash: hashOf(alg), data: b64(data) }).data);
    },
    async importKey(format, keyData, alg, extractable, usages) {
      const req = { op: "import", format: String(format), alg: algorithm(alg) };
      if (format === "jwk") req.jwk = keyData;
      else req.data = b64(keyData);
      return makeKey(call(req), extractable, usages);
    },
    async exportKey(format, key) {
      if (!key.extractable) throw new DOMException("the key is not extractable", "InvalidAccessError");
      const r = call({ op: "export", format: String(format), jwk: jwkOf(key), alg: key.algorithm.name });
      if (format === "jwk") return { ...r.jwk, key_ops: key.usages, ext: key.extractable };
      return ab(r.data);
    },
    async generateKey(alg, extractable, usages) {
      const r = call({ op: "generate", alg: algorithm(alg) });
      if (r.jwk) return makeKey(r, extractable, usages);
      return { publicKey: makeKey(r.publicKey, true, usages), privateKey: makeKey(r.privateKey, extractable, usages) };
    },
    async sign(alg, key, data) {
      need(key, "sign");
      return ab(call({ op: "sign", alg: algorithm(alg), keyAlg: algOf(key), jwk: jwkOf(key), data: b64(data) }).data);
    },
    async verify(alg, key, signature, data) {
      need(key, "verify");
      return call({ op: "verify", alg: algorithm(alg), keyAlg: algOf(key), jwk: jwkOf(key), signature: b64(signature), data: b64(data) }).ok;
    },
    async encrypt(alg, key, data) {
      need(key, "encrypt");
      return ab(call({ op: "encrypt", alg: algorithm(alg), keyAlg: algOf(key), jwk: jwkOf(key), data: b64(data) }).data);
    },
    async decrypt(alg, key, data) {
      need(key, "decrypt");
      return ab(call({ op: "decrypt", alg: algorithm(alg), keyAlg: algOf(key), jwk: jwkOf(key), data: b64(data) }).data);
    },
    async deriveBits(alg, key, length) {
      if (!key.usages.includes("deriveBits") && !key.usages.includes("deriveKey")) need(key, "deriveBits");
      return ab(call({ op: "deriveBits", alg: algorithm(alg), keyAlg: algOf(key), jwk: jwkOf(key), length }).data);
    },
    async deriveKey(alg, key, derived, extractable, usages) {
      need(key, "deriveKey");
      const d = algorithm(derived);
      const length = d.length ?? (d.name === "HMAC" ? { "SHA-1": 512, "SHA-256": 512, "SHA-384": 1024, "SHA-512": 1024 }[d.hash] : undefined);
      const bits = call({ op: "deriveBits", alg: algorithm(alg), keyAlg: algOf(key), jwk: jwkOf(key), length }).data;
      return makeKey(call({ op: "import", format: "raw", alg: d, data: bits }), extractable, usages);
    },
  };
  const algOf = (key) => {
    const a = { ...key.algorithm };
    if (a.hash) a.hash = a.hash.name;
    if (a.publicExponent) a.publicExponent = b64(a.publicExponent);
    return a;
  };
  Object.defineProperty(subtle, Symbol.toStringTag, { value: "SubtleCrypto" });
  return { subtle, CryptoKey, call, b64, unb64 };
}
