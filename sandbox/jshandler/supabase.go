package jshandler

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler/engine"
)

// supabaseNames are the variables pgflow's Edge Worker makes ctx.supabase from: its client
// uses the service role key.
var supabaseNames = []string{"SUPABASE_URL", "SUPABASE_SERVICE_ROLE_KEY"}

// supabaseScript is what follows a handler's bundle so that ctx.supabase has a client: the
// engine's supabase-js (supabasejs/) for a step granted both names and an http section, a
// script giving the reason for a step granted both names that cannot have it, and nothing
// for every other step, which so pays nothing for supabase-js (prelude/supabase.js then
// says what to grant). The prelude's prepare() takes what it defines.
func supabaseScript(c sandbox.Capabilities) []byte {
	names := c.Env.Names()
	if !slices.Contains(names, supabaseNames[0]) || !slices.Contains(names, supabaseNames[1]) {
		return nil
	}
	if c.HTTP == nil {
		return supabaseReason("the step is granted SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY but no http section: " +
			"grant http.allow of the URL's host in flows.yaml (the client calls Supabase's API with fetch)")
	}
	js, err := engine.Supabase()
	if err != nil {
		return supabaseReason("this binary was built without its @supabase/supabase-js: " + err.Error())
	}
	return js
}

func supabaseReason(why string) []byte {
	quoted, _ := json.Marshal(why)
	return fmt.Appendf(nil, "Object.defineProperty(globalThis, \"__pgflow_supabase_js\", { value: %s, configurable: true });\n", quoted)
}

// withSupabase is the bundle with supabaseScript after its own text, so the bundle's lines,
// and its source map, stay as they are.
func withSupabase(b *Bundle, c sandbox.Capabilities) *Bundle {
	extra := supabaseScript(c)
	if extra == nil {
		return b
	}
	out := *b
	out.JS = slices.Concat(b.JS, []byte("\n;"), extra)
	return &out
}
