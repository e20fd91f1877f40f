// What whatwg-url imports as tr46 (build.go points it here). A host name of ASCII characters
// with no punycode label maps to its lower case under UTS #46 as the URL standard runs it (no
// STD3 rules, no hyphen or length checks); any other name goes to the host's IDNA
// (golang.org/x/net/idna, sandbox/compute). tr46 itself would put its Unicode tables and
// regular expressions, compiled, into every task's snapshot: megabytes.
let host = null;
export function setHost(f) {
  host = f;
}
const simple = (domain) => /^[\x00-\x7f]*$/.test(domain) && !/(^|\.)xn--/i.test(domain);

export function toASCII(domain) {
  if (simple(domain)) return domain.toLowerCase();
  const r = host({ op: "idna", domain });
  return r.error ? null : r.domain;
}
