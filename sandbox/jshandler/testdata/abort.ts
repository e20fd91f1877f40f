// AbortSignals that stop a fetch whose server never answers: AbortSignal.timeout, a timer that
// calls abort() (openai's own pattern), fetches queued behind a running one, and a request the
// handler leaves running when it returns.
const errName = async (f: () => Promise<unknown>) => {
  try {
    await f();
    return "no error";
  } catch (e) {
    return (e as Error).name;
  }
};

export default async function handler(input: { case: string; base: string }) {
  const hang = input.base + "/hang";
  const hello = input.base + "/hello";
  // How many requests to /hang the server still holds, once it has seen closed what it will.
  const hanging = async () => Number(await (await fetch(input.base + "/hanging")).text());
  const start = performance.now();
  switch (input.case) {
    case "timeout":
      return { error: await errName(() => fetch(hang, { signal: AbortSignal.timeout(200) })), ms: performance.now() - start, hanging: await hanging() };
    case "controller": {
      const c = new AbortController();
      const t = setTimeout(() => c.abort(), 100);
      const error = await errName(() => fetch(hang, { signal: c.signal }));
      const ms = performance.now() - start;
      clearTimeout(t);
      return { error, ms, hanging: await hanging() };
    }
    case "completes": {
      // A pending timer and a signal that never fires change nothing for a request that answers.
      const res = await fetch(hello, { signal: AbortSignal.timeout(60000) });
      return { status: res.status, text: await res.text() };
    }
    case "queued": {
      // The second request waits for the first, which its signal stops; then it runs.
      const [a, b] = await Promise.all([
        errName(() => fetch(hang, { signal: AbortSignal.timeout(200) })),
        fetch(hello).then((r) => r.text()),
      ]);
      // A queued request whose signal fires before its turn never reaches the server.
      const c = new AbortController();
      const first = fetch(hang, { signal: AbortSignal.timeout(200) }).catch((e) => e.name);
      const second = fetch(hang, { signal: c.signal }).catch((e) => e.name);
      c.abort();
      return { a, b, first: await first, second: await second, hanging: await hanging() };
    }
    case "leftRunning":
      // The task ends with this request running (given 500 ms to reach the server): the host
      // stops it.
      fetch(hang).catch(() => {});
      await new Promise((r) => setTimeout(r, 500));
      return { returned: true };
  }
  throw new Error(`no case ${input.case}`);
}
