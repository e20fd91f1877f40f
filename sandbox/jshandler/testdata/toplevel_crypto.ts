// Keys imported once, by the module's top-level code, for every task; a key generated there
// would be shared by every task, so it is refused.
const enc = new TextEncoder();
const key = crypto.subtle.importKey("raw", enc.encode("Jefe"), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
const generated = crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256" }, false, ["sign"]).then(
  () => "generated",
  (e) => (e as Error).message,
);

export default async function handler(input: { data: string }) {
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", await key, enc.encode(input.data)));
  return { mac: Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join(""), generated: await generated };
}
