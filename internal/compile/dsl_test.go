package compile_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/compile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/testkit/pgtest"
)

// pgflowCompile runs @pgflow/dsl's own compileFlow (the project's pinned copy) under Node on
// every Flow the flow file exports, and returns its SQL statements.
func pgflowCompile(t *testing.T, project, file string) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is needed to run @pgflow/dsl's compileFlow: install Node.js")
	}
	entry := `import { compileFlow } from "@pgflow/dsl";
import * as file from ` + quote(file) + `;
const seen = new Set();
const out = [];
for (const v of Object.values(file)) {
  if (v === null || typeof v !== "object" || !Array.isArray(v.stepOrder) || seen.has(v)) continue;
  seen.add(v);
  out.push(...compileFlow(v));
}
console.log(JSON.stringify(out));
`
	// Deno's npm: specifiers, as the flow files write them, are the packages of node_modules.
	npmSpecifiers := api.Plugin{Name: "npm", Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: `^npm:`}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
			r := b.Resolve(strings.TrimPrefix(a.Path, "npm:"), api.ResolveOptions{ResolveDir: a.ResolveDir, Kind: a.Kind, Importer: a.Importer})
			if len(r.Errors) > 0 {
				return api.OnResolveResult{Errors: r.Errors}, nil
			}
			return api.OnResolveResult{Path: r.Path}, nil
		})
	}}
	r := api.Build(api.BuildOptions{
		Stdin:    &api.StdinOptions{Contents: entry, ResolveDir: project, Loader: api.LoaderJS},
		Bundle:   true,
		Format:   api.FormatESModule,
		Platform: api.PlatformNode,
		Write:    false,
		Plugins:  []api.Plugin{npmSpecifiers},
		LogLevel: api.LogLevelSilent,
	})
	if len(r.Errors) > 0 {
		t.Fatalf("bundling %s for Node: %v", file, r.Errors)
	}
	script := filepath.Join(t.TempDir(), "compile.mjs")
	if err := os.WriteFile(script, r.OutputFiles[0].Contents, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, script).Output()
	if err != nil {
		t.Fatalf("node %s: %v", script, err)
	}
	var stmts []string
	if err := json.Unmarshal(out, &stmts); err != nil {
		t.Fatalf("compileFlow's output %q: %v", out, err)
	}
	return stmts
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// definitions is what pgflow stores of the database's flows: flows, steps and dependencies,
// every column but the creation times.
func definitions(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	var out string
	if err := db.Pool.QueryRow(context.Background(), `select jsonb_build_object(
		'flows', (select jsonb_agg(to_jsonb(f) - 'created_at' order by f.flow_slug) from pgflow.flows f),
		'steps', (select jsonb_agg(to_jsonb(s) - 'created_at' order by s.flow_slug, s.step_slug) from pgflow.steps s),
		'deps', (select jsonb_agg(to_jsonb(d) - 'created_at' order by d.flow_slug, d.step_slug, d.dep_slug) from pgflow.deps d))::text`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// What pgflow-wasm compiles from a @pgflow/dsl flow file is what pgflow's own compiler makes
// of it: compileFlow's SQL run on one database and pgflow-wasm's compile on another leave the
// same rows in pgflow.flows, pgflow.steps and pgflow.deps, for every flow of the test project
// and @pgflow/dsl's own example flow (read from its npm package).
func TestDSLFlowsCompileAsPgflowsOwnCompiler(t *testing.T) {
	t.Parallel()
	project, err := filepath.Abs("../../testdata/dslflows")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(project, "node_modules", "@pgflow", "dsl", "dist", "compile-flow.js")); err != nil {
		t.Fatalf("@pgflow/dsl is not installed in %s: run `make dsl-testdata`", project)
	}
	files, err := filepath.Glob(filepath.Join(project, "supabase", "functions", "_flows", "*.ts"))
	if err != nil || len(files) < 3 {
		t.Fatalf("flow files %v (%v)", files, err)
	}
	files = append(files, filepath.Join(project, "node_modules", "@pgflow", "dsl", "dist", "example-flow.js"))
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			stmts := pgflowCompile(t, project, file)
			if len(stmts) == 0 {
				t.Fatal("compileFlow made no statements")
			}
			theirs := pgtest.NewDB(t)
			for _, s := range stmts {
				if _, err := theirs.Pool.Exec(context.Background(), s); err != nil {
					t.Fatalf("compileFlow's %s: %v", s, err)
				}
			}
			flows := filepath.Join(project, "flows-compile-"+strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))+".yaml")
			if err := os.WriteFile(flows, []byte("flows:\n  - flow: "+quote(file)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(flows) })
			f, err := flowfile.Load(flows)
			if err != nil {
				t.Fatal(err)
			}
			ours := pgtest.NewDB(t)
			if _, err := compile.Compile(context.Background(), ours.Pool, f, compile.Options{}); err != nil {
				t.Fatal(err)
			}
			if got, want := definitions(t, ours), definitions(t, theirs); got != want {
				t.Errorf("pgflow-wasm compiled\n%s\n@pgflow/dsl's compileFlow\n%s", got, want)
			}
		})
	}
}
