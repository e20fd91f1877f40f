// State a task leaves behind in the module, the global object and a prototype.
let calls = 0;

export default async function handler() {
  calls++;
  const g = globalThis as { seen?: number };
  g.seen = (g.seen ?? 0) + 1;
  const polluted = (Object.prototype as { mark?: boolean }).mark === true;
  (Object.prototype as { mark?: boolean }).mark = true;
  return { calls, seen: g.seen, polluted };
}
