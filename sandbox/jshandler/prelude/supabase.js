// ctx.supabase: the client pgflow's worker gives its handlers, supabase-js's createClient with
// SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY, for a step that grants both names (`env`) and
// the URL's host (`http.allow`: the client's requests go through fetch and the step's HTTP
// grant). A module of the prelude, bundled with it as sql.js is (build.go). supabase-js is
// not in the prelude: jshandler.Load appends it (supabasejs/) to the bundles of granted steps
// only, and prepare() calls this with its createClient, or with a string saying why a step
// granted both names has none; others get undefined. The client is made on the first read of
// ctx.supabase in a task, from that task's grants.
export default function pgflowSupabase(createClient) {
  "use strict";
  const names = ["SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY"];
  const grant = "grant the step env: [SUPABASE_URL, SUPABASE_SERVICE_ROLE_KEY] and http.allow of the URL's host in flows.yaml";
  return function defineSupabase(ctx, env) {
    let client;
    Object.defineProperty(ctx, "supabase", {
      enumerable: false,
      configurable: true,
      get() {
        if (client !== undefined) return client;
        if (typeof createClient === "string") throw new TypeError(`ctx.supabase is not available: ${createClient}`);
        if (typeof createClient !== "function")
          throw new TypeError(`ctx.supabase is not available to this step: ${grant} (supabase-js is added only to the steps granted both names)`);
        const values = names.map((name) => {
          let v;
          try {
            v = env[name];
          } catch (e) {
            throw new TypeError(`ctx.supabase: ${grant} (${e.message})`, { cause: e });
          }
          if (typeof v !== "string" || v === "") throw new TypeError(`ctx.supabase: ${name} is granted but not set in the worker's environment`);
          return v;
        });
        client = createClient(values[0], values[1], { auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false } });
        return client;
      },
    });
  };
}
