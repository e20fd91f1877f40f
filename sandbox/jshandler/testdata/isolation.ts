// State a task leaves behind, three ways: none of it may reach the next task.
let moduleCounter = 0;

export default async function handler() {
  moduleCounter++;
  const g = globalThis as { leaked?: number };
  g.leaked = (g.leaked ?? 0) + 1;
  const polluted = (Object.prototype as { pwned?: boolean }).pwned === true;
  (Object.prototype as { pwned?: boolean }).pwned = true;
  return { moduleCounter, globalCounter: g.leaked, sawPollution: polluted, random: Math.random(), uuid: crypto.randomUUID() };
}
