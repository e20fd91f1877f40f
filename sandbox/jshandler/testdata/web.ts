// The web globals the prelude gives a handler: URL, URLSearchParams, TextEncoder/Decoder,
// btoa/atob, crypto, Headers, Response.
export default async function handler() {
  const u = new URL("../b/./c?x=1&y=a+b#top", "https://Example.com:443/a/d/e");
  u.searchParams.append("z", "é &");
  const rel = new URL("/root?q", "http://h:8080/p/q");
  const params = new URLSearchParams({ a: "1", b: "two words" });
  params.sort();
  const h = new Headers({ "X-A": "1" });
  h.append("x-a", "2");
  const r = Response.json({ ok: true });
  const bytes = new TextEncoder().encode("héllo");
  return {
    href: u.href, host: u.host, path: u.pathname, x: u.searchParams.get("x"), y: u.searchParams.get("y"), hash: u.hash,
    rel: rel.toString(), origin: rel.origin, port: rel.port,
    params: params.toString(), invalid: URL.canParse("no scheme"),
    header: h.get("X-A"), json: await r.json(), type: r.headers.get("content-type"),
    bytes: bytes.length, text: new TextDecoder().decode(bytes), b64: btoa("hi!"), unb64: atob("aGkh"),
  };
}
