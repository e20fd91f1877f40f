package main_test

import (
	"strings"
	"testing"
)

// validate and module inspect never show a secret's value: they do not read one.
func TestSecretsNeverInValidateOrInspect(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_hunter2hunter2"
	charge := module(t, "modules/examples/tinygo/charge.wasm")
	good := writeFile(t, "flows.yaml", `
flows:
  - slug: checkout
    steps:
      - slug: charge
        module: `+charge+`
        http: {allow: ["api.payments.example"]}
        env: [PAYMENTS_URL, PAYMENTS_TOKEN]
`)
	bad := writeFile(t, "flows.yaml", `
flows:
  - slug: checkout
    steps:
      - slug: charge
        module: `+charge+`
        http: {allow: ["https://api.payments.example/v1"]}
        env: [PAYMENTS_TOKEN, DATABASE_URL]
`)
	env := []string{"PAYMENTS_TOKEN=" + secret, "PAYMENTS_URL=https://" + secret + ".example", "DATABASE_URL=postgres://app:" + secret + "@127.0.0.1:1/app"}
	for _, args := range [][]string{
		{"validate", "--flows", good},
		{"validate", "--flows", bad},
		{"module", "inspect", charge},
		{"module", "inspect", "--json", charge},
	} {
		stdout, stderr, code := runBinary(t, env, args...)
		if strings.Contains(stdout+stderr, "hunter2") {
			t.Errorf("%v shows a secret:\n%s%s", args, stdout, stderr)
		}
		if args[0] == "validate" && args[2] == bad {
			if code != 2 || !strings.Contains(stderr, "`env` may not list DATABASE_URL") || !strings.Contains(stderr, "has a scheme") {
				t.Errorf("validate of a bad file: exit %d\n%s", code, stderr)
			}
		} else if code != 0 {
			t.Errorf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
}
