// ctx.supabase: the client pgflow's worker gives its handlers, supabase-js's createClient with
// SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY, for a step that grants both names (`env`) and
// the URL's host (`http.allow`: the client's requests go through fetch and the step's HTTP
// grant). A module of the prelude, bundled with it as sql.js is (build.go): the prelude calls
// it once with createClient (undefined while the engine bundles no supabase-js) and uses
// the result on every task's ctx. The client is made on the first read of ctx.supabase in a
// task, from that task's grants.
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
        if (typeof createClient !== "function")
          throw new TypeError("ctx.supabase is not available in this build of pgflow-wasm: its engine bundles no @supabase/supabase-js; " +
            "call Supabase's HTTP API with fetch and a key from ctx.env (docs/from-typescript.md)");
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
