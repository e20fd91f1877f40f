package flowfile

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCapabilities(t *testing.T) {
	t.Parallel()
	path := writeFlows(t, `
flows:
  - slug: payments
    http:
      allow: ["api.stripe.com", "*.example.com:8443", "127.0.0.1:8080"]
      max_response_bytes: 2MiB
      max_requests: 3
    env: [STRIPE_KEY]
    steps:
      - slug: charge
        module: m.wasm
      - slug: notify
        module: m.wasm
        http:
          allow: ["hooks.example.org"]
        env: [HOOK_TOKEN, PGP_KEY]
      - slug: offline
        module: m.wasm
        http: false
        env: []
  - slug: plain
    steps:
      - slug: compute
        module: m.wasm
`, "m.wasm")
	f, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	fl := f.Flow("payments")
	charge, notify, offline := fl.Step("charge"), fl.Step("notify"), fl.Step("offline")
	if h := charge.HTTP; h == nil || len(h.Allow) != 3 || h.Allow[1].String() != "*.example.com:8443" ||
		h.MaxResponseBytes != 2<<20 || h.MaxRequestBytes != 1<<20 || h.MaxRequests != 3 || h.Line != 4 {
		t.Errorf("charge inherits the flow's http: %+v", h)
	}
	if !slices.Equal(charge.Env, []string{"STRIPE_KEY"}) {
		t.Errorf("charge env = %v", charge.Env)
	}
	if h := notify.HTTP; h == nil || len(h.Allow) != 1 || h.MaxRequests != 10 || h.MaxResponseBytes != 1<<20 || h.Line != 14 {
		t.Errorf("notify's own http replaces the flow's (defaults apply): %+v", h)
	}
	if !slices.Equal(notify.Env, []string{"HOOK_TOKEN", "PGP_KEY"}) {
		t.Errorf("notify env = %v", notify.Env)
	}
	if offline.HTTP != nil || len(offline.Env) != 0 {
		t.Errorf("offline: http %+v env %v, want none", offline.HTTP, offline.Env)
	}
	if c := f.Flow("plain").Step("compute"); c.HTTP != nil || c.Env != nil {
		t.Errorf("a step without http or env gets nothing: %+v %v", c.HTTP, c.Env)
	}
	if got, want := notify.Where(f, fl), `step "notify" of flow "payments" (`+path+`:14)`; got != want {
		t.Errorf("Where = %s, want %s", got, want)
	}
	if got, want := charge.Where(f, fl), `step "charge" of flow "payments" (`+path+`:4)`; got != want {
		t.Errorf("Where = %s, want %s (the flow's http line)", got, want)
	}
	p := charge.HTTP.Policy()
	if len(p.Allow) != 3 || p.MaxRequests != 3 || p.MaxResponseBytes != 2<<20 {
		t.Errorf("Policy() = %+v", p)
	}
}

func TestCapabilityErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"http not a mapping", `
flows:
  - slug: a
    steps:
      - {slug: s, module: m.wasm, http: yes}
`, []string{"flows.yaml:5: `http` must be a mapping like {allow: [\"api.example.com\"]}, or false for no HTTP, not \"yes\""}},
		{"http without allow", `
flows:
  - slug: a
    steps:
      - slug: s
        module: m.wasm
        http:
          max_requests: 3
`, []string{"flows.yaml:7: `http` of step \"s\" of flow \"a\" has no `allow` list"}},
		{"bad entries", `
flows:
  - slug: a
    http:
      allow:
        - https://api.example.com/v1
        - "::1"
        - api.example.com:99999
        - "*.example.com"
        - "*.EXAMPLE.com"
        - {host: x}
    steps:
      - {slug: s, module: m.wasm}
`, []string{
			"flows.yaml:6: `http.allow` entry \"https://api.example.com/v1\" has a scheme: write only host[:port], like \"api.example.com\"",
			"flows.yaml:7: `http.allow` entry \"::1\": write an IPv6 address in brackets, like [::1]:443",
			"flows.yaml:8: `http.allow` entry \"api.example.com:99999\": the port must be a number from 1 to 65535",
			"flows.yaml:10: \"*.EXAMPLE.com\" is listed twice in `http.allow`",
			"flows.yaml:11: each `http.allow` entry must be a host[:port]",
		}},
		{"empty allow", `
flows:
  - slug: a
    steps:
      - {slug: s, module: m.wasm, http: {allow: []}}
`, []string{"flows.yaml:5: `http.allow` must be a list of host[:port] entries"}},
		{"unknown http key and bad limits", `
flows:
  - slug: a
    steps:
      - slug: s
        module: m.wasm
        http:
          allow: [api.example.com]
          max_respones_bytes: 1MiB
          max_request_bytes: 2GiB
          max_requests: 0
`, []string{
			"flows.yaml:9: unknown key \"max_respones_bytes\" in `http` of step \"s\" of flow \"a\" (did you mean \"max_response_bytes\"?)",
			"flows.yaml:10: `http.max_request_bytes` \"2GiB\" is not a size from 1 byte to 1GiB",
			"flows.yaml:11: `http.max_requests` is 0: it must be from 1 to 10000\n",
		}},
		{"bad env", `
flows:
  - slug: a
    env: [DATABASE_URL]
    steps:
      - slug: s
        module: m.wasm
        env: [1BAD, PGPASSWORD, PGFLOW_WASM_CONCURRENCY, OK, OK]
      - {slug: t, module: m.wasm, env: STRIPE_KEY}
`, []string{
			"flows.yaml:4: `env` may not list DATABASE_URL: it configures the worker itself",
			"flows.yaml:8: each `env` entry must be an environment variable name",
			"flows.yaml:8: `env` may not list PGPASSWORD",
			"flows.yaml:8: `env` may not list PGFLOW_WASM_CONCURRENCY",
			"flows.yaml:8: OK is listed twice in `env`",
			"flows.yaml:9: `env` must be a list of environment variable names, e.g. [STRIPE_KEY], not \"STRIPE_KEY\"",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFlows(t, tc.yaml, "m.wasm")
			_, err := Load(path)
			if err == nil {
				t.Fatal("loaded without an error")
			}
			msg := strings.ReplaceAll(err.Error(), path, "flows.yaml") + "\n"
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestSQLSection(t *testing.T) {
	t.Parallel()
	path := writeFlows(t, `
flows:
  - slug: orders
    sql:
      role: orders_writer
    steps:
      - slug: reserve
        module: m.wasm
      - slug: report
        module: m.wasm
        sql:
          role: Reports_Reader
          database_env: REPORTS_DB_URL
          statement_timeout: 2s
          max_rows: 50
          max_result_bytes: 64KiB
      - slug: audit
        module: m.wasm
        sql:
          role: auditor
          transactional: false
          allow_privileged_role: true
      - slug: compute
        module: m.wasm
        sql: false
`, "m.wasm")
	f, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	fl := f.Flow("orders")
	if s := fl.Step("reserve").SQL; s == nil || s.Role != "orders_writer" || !s.Transactional || s.DatabaseEnv != "" ||
		s.StatementTimeout != 0 || s.MaxRows != 1000 || s.MaxResultBytes != 1<<20 || s.AllowPrivilegedRole || s.Line != 4 {
		t.Errorf("reserve inherits the flow's sql, transactional by default: %+v", s)
	}
	if s := fl.Step("report").SQL; s == nil || s.Role != "Reports_Reader" || s.Transactional || s.DatabaseEnv != "REPORTS_DB_URL" ||
		s.StatementTimeout != 2*time.Second || s.MaxRows != 50 || s.MaxResultBytes != 64<<10 || s.Line != 11 {
		t.Errorf("report: another database is not transactional: %+v", s)
	}
	if s := fl.Step("audit").SQL; s == nil || s.Transactional || !s.AllowPrivilegedRole {
		t.Errorf("audit: %+v", s)
	}
	if s := fl.Step("compute").SQL; s != nil {
		t.Errorf("compute: sql false drops the flow's: %+v", s)
	}
	if got, want := fl.Step("report").WhereSQL(f, fl), `step "report" of flow "orders" (`+path+`:11)`; got != want {
		t.Errorf("WhereSQL = %s, want %s", got, want)
	}
}

func TestSQLSectionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"not a mapping", `sql: orders_writer`, []string{"flows.yaml:6: `sql` must be a mapping like {role: orders_writer}, or false"}},
		{"no role", `sql: {max_rows: 5}`, []string{"flows.yaml:6: `sql` of step \"s\" of flow \"f\" has no `role`"}},
		{"unknown key", "sql:\n          role: r\n          roles: x", []string{`flows.yaml:8: unknown key "roles" in ` + "`sql`"}},
		{"role not a string", "sql:\n          role: [a]", []string{"flows.yaml:7: `sql.role` must be a role name"}},
		{"role none", "sql:\n          role: NONE", []string{"flows.yaml:7: `sql.role` \"NONE\" is not a role a step can run as"}},
		{"transactional elsewhere", "sql:\n          role: r\n          database_env: OTHER_DB\n          transactional: true",
			[]string{"flows.yaml:9: `sql.transactional: true` needs the pgflow database"}},
		{"database_env is the worker's", "sql:\n          role: r\n          database_env: DATABASE_URL",
			[]string{"flows.yaml:8: `sql.database_env: DATABASE_URL` is the pgflow database"}},
		{"database_env libpq", "sql:\n          role: r\n          database_env: PGPASSWORD", []string{"may not name PGPASSWORD"}},
		{"timeout without unit", "sql:\n          role: r\n          statement_timeout: 5", []string{"`sql.statement_timeout` 5 has no unit"}},
		{"timeout too long", "sql:\n          role: r\n          statement_timeout: 48h", []string{"from 1ms to 24h"}},
		{"max_rows", "sql:\n          role: r\n          max_rows: 0", []string{"`sql.max_rows` is 0: it must be from 1 to 10000000"}},
		{"max_result_bytes", "sql:\n          role: r\n          max_result_bytes: 1GiB", []string{"`sql.max_result_bytes` \"1GiB\" is not a size from 1 byte to 256MiB"}},
		{"bool", "sql:\n          role: r\n          transactional: yes", []string{"`sql.transactional` must be true or false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFlows(t, `
flows:
  - slug: f
    steps:
      - slug: s
        `+tc.sql+`
        module: m.wasm
`, "m.wasm")
			_, err := Load(path)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(strings.ReplaceAll(err.Error(), path, "flows.yaml"), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
