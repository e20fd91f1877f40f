// The web platform of the sandbox, one case per call (input.case): each returns what it
// observed, and TestWebPlatform compares it with what the standards say.
import { Buffer as NodeBuffer } from "node:buffer";
import { createHash, createHmac, randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import { format, promisify } from "node:util";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hex = (b: ArrayBuffer | Uint8Array) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");
const enc = new TextEncoder();
const errName = async (f: () => unknown) => {
  try {
    await f();
    return "no error";
  } catch (e) {
    return (e as Error).name;
  }
};

const cases: Record<string, (input: any, ctx: any) => Promise<unknown>> = {
  async url() {
    const u = new URL("https://user:pw@Example.COM:443/a/./b/../c d?x=1#frag");
    const before = u.href;
    u.protocol = "http";
    u.port = "8080";
    u.pathname = "/new path";
    u.username = "";
    u.password = "";
    u.searchParams.append("q", "a b&c");
    u.hash = "";
    const rel = new URL("../x?y#z", "http://h/a/b/c");
    const p = new URLSearchParams("b=2&a=1&a=3");
    p.sort();
    return {
      before, after: u.href, host: u.host, rel: rel.href,
      idna: new URL("http://münchen.de/").hostname, ipv6: new URL("http://[0:0::1]:80/").host, ipv4: new URL("http://0x7f.1/").hostname,
      file: new URL("file:///C:/x/../y").href, blob: new URL("blob:https://a.example/uuid").origin,
      params: p.toString(), size: p.size, hasValue: p.has("a", "3"),
      invalid: await errName(() => new URL("http://exa mple.com")), canParse: [URL.canParse("x:"), URL.canParse("/p"), URL.canParse("/p", "http://h")],
    };
  },
  async abort() {
    const c = new AbortController();
    const seen: string[] = [];
    c.signal.addEventListener("abort", (e) => seen.push(e.type));
    c.signal.onabort = () => seen.push("onabort");
    c.abort();
    const t = AbortSignal.timeout(20);
    const early = t.aborted;
    await sleep(40);
    const any = AbortSignal.any([new AbortController().signal, AbortSignal.abort("why")]);
    return {
      aborted: c.signal.aborted, reason: c.signal.reason.name, seen, early, timeout: t.aborted, timeoutReason: t.reason.name,
      any: [any.aborted, any.reason], fetch: await errName(() => fetch("http://127.0.0.1:9/", { signal: AbortSignal.abort() })),
      throwIfAborted: await errName(() => c.signal.throwIfAborted()), ctor: await errName(() => new (AbortSignal as any)()),
      foreign: await errName(() => fetch("http://127.0.0.1:9/", { signal: { aborted: true, reason: undefined, addEventListener() {} } as any })),
    };
  },
  async events() {
    const et = new EventTarget();
    const seen: unknown[] = [];
    const f = (e: Event) => seen.push(e.type);
    et.addEventListener("x", f);
    et.addEventListener("x", (e) => seen.push("once:" + e.type), { once: true });
    et.dispatchEvent(new Event("x"));
    et.dispatchEvent(new Event("x"));
    et.removeEventListener("x", f);
    et.dispatchEvent(new Event("x"));
    const ce = new CustomEvent("c", { detail: { a: 1 } });
    const ev = new Event("e", { cancelable: true });
    ev.preventDefault();
    return { seen, detail: ce.detail, prevented: ev.defaultPrevented };
  },
  async blob() {
    const b = new Blob(["héllo ", enc.encode("world")], { type: "Text/Plain" });
    const f = new File([b], "a.txt", { type: "text/plain", lastModified: 42 });
    const fd = new FormData();
    fd.append("name", "x");
    fd.append("file", f);
    fd.append("name", "y");
    fd.set("k", "v");
    const body = await new Response(fd).text();
    const req = new Request("http://h/", { method: "POST", body: fd });
    return {
      size: b.size, type: b.type, text: await b.text(), slice: await b.slice(-5).text(), file: [f.name, f.lastModified, f.size, f instanceof Blob],
      all: fd.getAll("name"), keys: [...fd.keys()], fileBack: (fd.get("file") as File).name,
      multipart: body.includes('Content-Disposition: form-data; name="file"; filename="a.txt"') && body.includes("\r\n\r\nhéllo world\r\n"),
      contentType: req.headers.get("content-type")!.startsWith("multipart/form-data; boundary="),
      streamed: await new Response(b.stream()).text(),
    };
  },
  async streams() {
    const s = new ReadableStream({
      start(c) {
        c.enqueue(enc.encode("a"));
        c.enqueue(enc.encode("b"));
        c.close();
      },
    });
    const r = new Response(s);
    const reader = new Response("chunked").body!.getReader();
    const first = await reader.read();
    const t = new TransformStream({ transform(chunk, c) { c.enqueue(chunk.toUpperCase()); } });
    const w = t.writable.getWriter();
    w.write("x");
    w.close();
    const out = await t.readable.getReader().read();
    return { text: await r.text(), used: r.bodyUsed, first: new TextDecoder().decode(first.value), transformed: out.value, again: await errName(() => r.text()) };
  },
  async fetchtypes() {
    const h = new Headers([["Set-Cookie", "a=1"], ["set-cookie", "b=2"], ["X-B", "1"]]);
    h.append("x-b", "2");
    const req = new Request("http://h/p", { method: "post", headers: { "x-a": "1" }, body: "hi" });
    const clone = req.clone();
    const res = Response.json({ a: 1 }, { status: 201 });
    return {
      cookies: h.getSetCookie(), xb: h.get("X-B"), entries: [...h].length, badName: await errName(() => h.set("bad name", "x")),
      method: req.method, url: req.url, body: await req.text(), cloneBody: await clone.text(), ctype: clone.headers.get("content-type"),
      res: [res.status, res.ok, res.headers.get("content-type"), await res.json()], error: Response.error().type,
      redirect: Response.redirect("http://h/x", 301).headers.get("location"), getBody: await errName(() => new Request("http://h/", { body: "x" })),
      relative: await errName(() => new Request("/p")), websocket: await errName(() => new WebSocket("wss://h/")),
    };
  },
  async text() {
    const split = enc.encode("é€");
    const d = new TextDecoder();
    const streamed = d.decode(split.subarray(0, 1), { stream: true }) + d.decode(split.subarray(1, 3), { stream: true }) + d.decode(split.subarray(3));
    const chunks: string[] = [];
    await new Blob([split]).stream().pipeThrough(new TextDecoderStream()).pipeTo(new WritableStream({ write(s) { chunks.push(s); } }));
    const dest = new Uint8Array(4);
    const r = new TextEncoder().encodeInto("aé€", dest);
    return {
      encodeInto: [r.read, r.written], streamed, piped: chunks.join(""), bom: new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x61])),
      keepBom: new TextDecoder("utf-8", { ignoreBOM: true }).decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x61])).length,
      fatal: await errName(() => new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array([0xff]))),
      btoa: btoa("hi!\xff"), atob: atob(" aGkh/w== "), badAtob: await errName(() => atob("a")), badBtoa: await errName(() => btoa("€")),
    };
  },
  async clone() {
    const o: any = { d: new Date(0), m: new Map([[1, { a: [1n] }]]), s: new Set(["x"]), r: /a+/gi, u: new Uint8Array([1, 2]) };
    o.self = o;
    const c = structuredClone(o);
    return {
      date: c.d instanceof Date && c.d.getTime() === 0, map: c.m.get(1).a[0] === 1n && c.m.get(1) !== o.m.get(1), set: c.s.has("x"),
      re: String(c.r), u8: Array.from(c.u), cyclic: c.self === c, fn: await errName(() => structuredClone(() => 1)),
    };
  },
  async microtasks() {
    const order: string[] = [];
    setTimeout(() => order.push("timeout"), 0);
    queueMicrotask(() => order.push("micro"));
    Promise.resolve().then(() => order.push("promise"));
    order.push("sync");
    await sleep(5);
    return order;
  },
  async timers() {
    const t0 = performance.now();
    await sleep(60);
    const waited = performance.now() - t0;
    let n = 0;
    await new Promise<void>((done) => {
      const id = setInterval(() => {
        if (++n === 3) {
          clearInterval(id);
          done();
        }
      }, 5);
    });
    let cleared = true;
    clearTimeout(setTimeout(() => (cleared = false), 1));
    await sleep(5);
    let cap = "";
    const ids: number[] = [];
    try {
      for (let i = 0; i < 20000; i++) ids.push(setTimeout(() => {}, 1e9) as unknown as number);
    } catch (e) {
      cap = (e as Error).name + ": " + (e as Error).message;
    }
    ids.forEach((id) => clearTimeout(id));
    return { waited: waited >= 55, n, cleared, cap, pending: ids.length };
  },
  async crypto() {
    const s = crypto.subtle;
    const uuid = crypto.randomUUID();
    const sha = hex(await s.digest("SHA-256", enc.encode("abc")));
    const hk = await s.importKey("raw", enc.encode("Jefe"), { name: "HMAC", hash: "SHA-256" }, true, ["sign", "verify"]);
    const mac = await s.sign("HMAC", hk, enc.encode("what do ya want for nothing?"));
    const aes = await s.generateKey({ name: "AES-GCM", length: 256 }, true, ["encrypt", "decrypt"]);
    const iv = crypto.getRandomValues(new Uint8Array(12));
    const ct = await s.encrypt({ name: "AES-GCM", iv, additionalData: enc.encode("aad") }, aes, enc.encode("secret"));
    const pt = new TextDecoder().decode(await s.decrypt({ name: "AES-GCM", iv, additionalData: enc.encode("aad") }, aes, ct));
    const tampered = await errName(() => s.decrypt({ name: "AES-GCM", iv }, aes, ct));
    const ec = await s.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
    const esig = await s.sign({ name: "ECDSA", hash: "SHA-256" }, ec.privateKey, enc.encode("m"));
    const spki = await s.exportKey("spki", ec.publicKey);
    const pub2 = await s.importKey("spki", spki, { name: "ECDSA", namedCurve: "P-256" }, true, ["verify"]);
    const pk8 = await s.exportKey("pkcs8", ec.privateKey);
    const priv2 = await s.importKey("pkcs8", pk8, { name: "ECDSA", namedCurve: "P-256" }, true, ["sign"]);
    const jwk = await s.exportKey("jwk", ec.privateKey);
    const esig2 = await s.sign({ name: "ECDSA", hash: "SHA-256" }, priv2, enc.encode("m"));
    const rsa = await s.generateKey({ name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" }, false, ["sign", "verify"]);
    const rsig = await s.sign("RSASSA-PKCS1-v1_5", rsa.privateKey, enc.encode("m"));
    const pss = await s.importKey("jwk", await s.exportKey("jwk", rsa.publicKey), { name: "RSA-PSS", hash: "SHA-256" }, true, ["verify"]);
    const ed = await s.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]);
    const edsig = await s.sign("Ed25519", ed.privateKey, enc.encode("m"));
    const pbk = await s.importKey("raw", enc.encode("password"), "PBKDF2", false, ["deriveBits"]);
    const bits = await s.deriveBits({ name: "PBKDF2", hash: "SHA-1", salt: enc.encode("salt"), iterations: 1 }, pbk, 160);
    return {
      uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(uuid), sha, hmac: hex(mac),
      hmacVerify: await s.verify("HMAC", hk, mac, enc.encode("what do ya want for nothing?")), pt, ctLen: ct.byteLength, tampered,
      ecdsa: [esig.byteLength, await s.verify({ name: "ECDSA", hash: "SHA-256" }, pub2, esig, enc.encode("m")), await s.verify({ name: "ECDSA", hash: "SHA-256" }, ec.publicKey, esig2, enc.encode("m")), await s.verify({ name: "ECDSA", hash: "SHA-256" }, ec.publicKey, esig, enc.encode("n"))],
      jwk: [jwk.kty, jwk.crv, typeof jwk.d], rsa: [rsa.privateKey.algorithm.modulusLength, await s.verify("RSASSA-PKCS1-v1_5", rsa.publicKey, rsig, enc.encode("m")), rsa.privateKey.extractable],
      notExtractable: await errName(() => s.exportKey("pkcs8", rsa.privateKey)), pssWithPkcs1Sig: await s.verify({ name: "RSA-PSS", saltLength: 32 }, pss, rsig, enc.encode("m")),
      ed25519: await s.verify("Ed25519", ed.publicKey, edsig, enc.encode("m")), pbkdf2: hex(bits),
      badKey: await errName(() => s.importKey("spki", new Uint8Array([1, 2, 3]), { name: "ECDSA", namedCurve: "P-256" }, true, ["verify"])),
      wrongUsage: await errName(() => s.sign("HMAC", pub2, enc.encode("m"))),
    };
  },
  async intl() {
    const d = new Date(Date.UTC(2024, 0, 2, 15, 4, 5));
    return {
      number: new Intl.NumberFormat("en-US").format(1234567.891), usd: new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" }).format(1234.5),
      eur: new Intl.NumberFormat("en-US", { style: "currency", currency: "EUR" }).format(-3), percent: new Intl.NumberFormat("en-US", { style: "percent" }).format(0.256),
      fixed: new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }).format(1.005), locale: (12345.6).toLocaleString(),
      date: new Intl.DateTimeFormat("en-US", { timeZone: "UTC" }).format(d), medium: new Intl.DateTimeFormat("en-US", { dateStyle: "medium", timeZone: "UTC" }).format(d),
      long: new Intl.DateTimeFormat("en-US", { dateStyle: "full", timeStyle: "short", timeZone: "UTC" }).format(d),
      parts: new Intl.DateTimeFormat("en-US", { hour: "2-digit", minute: "2-digit", hour12: false, timeZone: "UTC" }).format(d),
      zone: new Intl.DateTimeFormat().resolvedOptions().timeZone, plural: [new Intl.PluralRules("en-US").select(1), new Intl.PluralRules("en-US", { type: "ordinal" }).select(22)],
      otherZone: await errName(() => new Intl.DateTimeFormat("en-US", { timeZone: "Europe/Paris" })),
    };
  },
  async deno() {
    return { granted: Deno.env.get("API_TOKEN"), unlisted: Deno.env.get("HOME") ?? null, has: Deno.env.has("API_TOKEN") };
  },
  async node() {
    const em = new EventEmitter();
    const got: unknown[] = [];
    em.on("x", (a: unknown) => got.push(a));
    em.emit("x", 1);
    const cb = (v: number, done: (e: unknown, r?: number) => void) => done(null, v * 2);
    return {
      buffer: [NodeBuffer.from("héllo").toString("base64"), NodeBuffer.from("68690a", "hex").toString(), Buffer === NodeBuffer],
      sha: createHash("sha256").update("a").update("bc").digest("hex"), md5: createHash("md5").update("abc").digest("hex"),
      hmac: createHmac("sha256", "Jefe").update("what do ya want for nothing?").digest("base64"), random: randomBytes(16).length,
      events: got, format: format("%s=%d %j", "a", 1, { b: 2 }), promisify: await promisify(cb)(21),
    };
  },
};

export default async function handler(input: { case: string }, ctx: any) {
  return await cases[input.case](input, ctx);
}
