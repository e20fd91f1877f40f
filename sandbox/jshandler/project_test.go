package jshandler_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// tree writes name -> content under dir; a content starting with "->" makes a symlink to
// the rest, and "|fifo" a named pipe (reading it blocks until someone writes).
func tree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else if content == "|fifo" {
			err = syscall.Mkfifo(p, 0o644)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// secret is what lies outside the handler's project in these tests: no bundle, snapshot or
// message may hold it.
const secret = "outside-secret-6b1f0c"

// A handler is bundled from its own project's files only (the folder of flows.yaml here):
// esbuild followed every import, so a step granted nothing could read the worker's
// environment, /etc/passwd, or a file beside its project, as text baked into its snapshot.
// Each way out is refused at the import's line, and nothing of the file reaches the
// snapshot cache or the message.
func TestAHandlerReadsNothingOutsideItsProject(t *testing.T) {
	t.Parallel()
	e, err := sandbox.New(sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	base := t.TempDir()
	tree(t, base, map[string]string{
		"secret.txt":             secret,
		"secrets.json":           `{"token": "` + secret + `"}`,
		"evil/package.json":      `{"name": "evil", "main": "index.js"}`,
		"evil/index.js":          `export default "` + secret + `";`,
		"proj/flows.yaml":        "flows: []\n",
		"proj/link.txt":          "->../secret.txt",
		"proj/outside":           "->..",
		"proj/node_modules/evil": "->../../evil",
		"proj/environ.ts": "// the worker's environment\n" +
			"import env from \"/proc/self/environ\" with { type: \"text\" };\nexport default async () => env;\n",
		"proj/passwd.ts":  "import pw from \"/etc/passwd\" with { type: \"text\" };\nexport default async () => pw;\n",
		"proj/parent.ts":  "\nimport s from \"../secret.txt\" with { type: \"text\" };\nexport default async () => s;\n",
		"proj/link.ts":    "import s from \"./link.txt\" with { type: \"text\" };\nexport default async () => s;\n",
		"proj/folder.ts":  "import s from \"./outside/secret.txt\" with { type: \"text\" };\nexport default async () => s;\n",
		"proj/json.ts":    "import s from \"../secrets.json\" with { type: \"json\" };\nexport default async () => s;\n",
		"proj/require.ts": "const s = require(\"../secret.txt\");\nexport default async () => s;\n",
		"proj/dynamic.ts": "export default async () => (await import(\"../secret.txt\")).default;\n",
		"proj/package.ts": "import s from \"evil\";\nexport default async () => s;\n",
	})
	proj := filepath.Join(base, "proj")
	for file, want := range map[string]string{
		"environ.ts": `environ.ts:2:17: import of "/proc/self/environ" refused: a handler may import only files of its own project (` + proj + `) and its node_modules; /proc belongs to the worker`,
		"passwd.ts":  `passwd.ts:1:16: import of "/etc/passwd" refused: a handler may import only files of its own project (` + proj + `) and its node_modules; it is an absolute path`,
		"parent.ts":  `parent.ts:2:15: import of "../secret.txt" refused: a handler may import only files of its own project (` + proj + `) and its node_modules; ` + filepath.Join(base, "secret.txt") + ` is outside the project`,
		"link.ts":    `link.ts:1:15: import of "./link.txt" refused: a handler may import only files of its own project (` + proj + `) and its node_modules; ` + filepath.Join(proj, "link.txt") + " leads through a symlink to " + filepath.Join(base, "secret.txt") + ", outside the project",
		"folder.ts":  `folder.ts:1:15: import of "./outside/secret.txt" refused: `,
		"json.ts":    `json.ts:1:15: import of "../secrets.json" refused: `,
		"require.ts": `require.ts:1:19: import of "../secret.txt" refused: `,
		"dynamic.ts": `dynamic.ts:1:42: import of "../secret.txt" refused: `,
		"package.ts": `package.ts:1:15: import of "evil" refused: `,
	} {
		cache := t.TempDir()
		m, err := jshandler.Load(context.Background(), e, filepath.Join(proj, file), sandbox.ModuleConfig{},
			jshandler.Options{CacheDir: cache, LoadTimeout: 5 * time.Second})
		if err == nil {
			t.Errorf("%s loaded; want it refused with %q", file, want)
			_ = m.Close(context.Background())
		} else {
			wantKind(t, err, sandbox.KindInvalidModule, want)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the message quotes the secret: %v", file, err)
			}
		}
		noFileHolds(t, cache, secret)
	}
}

// noFileHolds fails when a file under dir contains s.
func noFileHolds(t *testing.T, dir, s string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(s)) {
			t.Errorf("%s holds %q", path, s)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// What esbuild reads besides imports is the project's too: a tsconfig.json's "paths" and
// "extends", a package.json's "imports", a package.json that is a symlink out (whose parse
// error would quote its first line) or a pipe (which would stall the worker), and the source
// map a file's sourceMappingURL comment names. Above the project, esbuild's messages about a
// package.json are not quoted.
func TestAHandlersConfigFilesReadNothingOutsideItsProject(t *testing.T) {
	t.Parallel()
	e, err := sandbox.New(sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	handler := "import s from \"@up/secret.txt\" with { type: \"text\" };\nexport default async () => s;\n"
	for name, c := range map[string]struct {
		files map[string]string
		want  string
	}{
		"tsconfig paths": {map[string]string{
			"proj/tsconfig.json": `{"compilerOptions": {"baseUrl": ".", "paths": {"@up/*": ["../*"]}}}`,
		}, `h.ts:1:15: import of "@up/secret.txt" refused: `},
		"package.json imports": {map[string]string{
			"proj/package.json": `{"name": "p", "imports": {"#up": "./outside/secret.txt"}}`,
			"proj/outside":      "->..",
			"proj/h.ts":         "import s from \"#up\" with { type: \"text\" };\nexport default async () => s;\n",
		}, `h.ts:1:15: import of "#up" refused: `},
		"tsconfig extends": {map[string]string{
			"proj/tsconfig.json": "{\n  // the worker's environment\n  \"extends\": \"/proc/self/environ\",\n}\n",
		}, `tsconfig.json: "extends" of /proc/self/environ refused: `},
		"tsconfig extends a symlink": {map[string]string{
			"proj/tsconfig.json": `{"extends": "./base"}`,
			"proj/base.json":     "->../secret.txt",
		}, `"extends" of ` + "BASE/proj/base.json refused: "},
		"package.json above the project": {map[string]string{
			"package.json": "->secret.txt",
		}, `package.json: esbuild reported a problem in this file, not shown: `},
		"package.json symlinked out": {map[string]string{
			"proj/node_modules/x/package.json": "->../../../secret.txt",
		}, "BASE/proj/node_modules/x/package.json refused: esbuild reads it while it resolves imports"},
		"package.json a pipe": {map[string]string{
			"proj/package.json": "|fifo",
		}, "BASE/proj/package.json refused: esbuild reads it while it resolves imports"},
		"a pipe imported": {map[string]string{
			"proj/h.ts": "import s from \"./pipe\" with { type: \"text\" };\nexport default async () => s;\n",
			"proj/pipe": "|fifo",
		}, `h.ts:1:15: import of "./pipe" refused: `},
		"source map comment": {map[string]string{
			"proj/h.ts": "export default async () => 1;\n//# sourceMappingURL=../secret.txt\n",
		}, `h.ts:2:22: source map "../secret.txt" refused: `},
		"source map block comment": {map[string]string{
			"proj/h.ts": "export default async () => 1;\n/*# sourceMappingURL=../secret.txt*/\n",
		}, `h.ts:2:22: source map "../secret.txt" refused: `},
		"source map comment of a pipe": {map[string]string{
			"proj/h.ts": "export default async () => 1;\n//# sourceMappingURL=file:///BASE/pipe\n",
			"pipe":      "|fifo",
		}, `h.ts:2:22: source map "file:///BASE/pipe" refused: `},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			base := t.TempDir()
			files := map[string]string{"secret.txt": secret, "proj/flows.yaml": "flows: []\n", "proj/h.ts": handler}
			for k, v := range c.files {
				files[k] = v
			}
			for k, v := range files {
				files[k] = strings.ReplaceAll(v, "BASE", base)
			}
			tree(t, base, files)
			cache := t.TempDir()
			m, err := jshandler.Load(context.Background(), e, filepath.Join(base, "proj", "h.ts"), sandbox.ModuleConfig{},
				jshandler.Options{CacheDir: cache, LoadTimeout: 5 * time.Second})
			if err == nil {
				t.Errorf("the handler loaded; want it refused with %q", c.want)
				_ = m.Close(context.Background())
			} else {
				wantKind(t, err, sandbox.KindInvalidModule, strings.ReplaceAll(c.want, "BASE", base))
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the message quotes the secret: %v", err)
				}
			}
			noFileHolds(t, cache, secret)
		})
	}
}

// Within its project a handler imports as before: relative files, a package of its
// node_modules (also one linked inside node_modules, as pnpm lays them out), and symlinks
// that stay inside the project.
func TestAHandlerImportsItsOwnProject(t *testing.T) {
	t.Parallel()
	e, err := sandbox.New(sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	base := t.TempDir()
	tree(t, base, map[string]string{
		"proj/flows.yaml":                          "flows: []\n",
		"proj/tsconfig.json":                       "{\n  // comments and trailing commas, as tsc allows\n  \"extends\": \"./tsconfig.base\",\n  \"compilerOptions\": {\"baseUrl\": \".\", \"paths\": {\"@lib/*\": [\"lib/*\"],},},\n}\n",
		"proj/tsconfig.base.json":                  `{"compilerOptions": {"strict": true}}`,
		"proj/lib/money.ts":                        "export const cents = (n: number): number => Math.round(n * 100);\n",
		"proj/lib/words.txt":                       "hello",
		"proj/lib/alias.ts":                        "->money.ts",
		"proj/shared":                              "->lib",
		"proj/node_modules/tiny/package.json":      `{"name": "tiny", "main": "index.js"}`,
		"proj/node_modules/tiny/index.js":          "export const twice = (n) => 2 * n;\n",
		"proj/node_modules/.store/pn/index.js":     "export default 'pnpm';\n",
		"proj/node_modules/.store/pn/package.json": `{"name": "pn", "main": "index.js"}`,
		"proj/node_modules/pn":                     "->.store/pn",
		"proj/steps/h.ts": `import { cents } from "../lib/money";
import { cents as c2 } from "../lib/alias";
import { cents as c3 } from "@lib/money";
import words from "../shared/words.txt" with { type: "text" };
import { twice } from "tiny";
import pn from "pn";
export default async (n: number) => ({ a: cents(n), b: c2(n), c: c3(n), words, d: twice(n), pn });
`,
	})
	m, err := jshandler.Load(context.Background(), e, filepath.Join(base, "proj", "steps", "h.ts"), sandbox.ModuleConfig{},
		jshandler.Options{CacheDir: t.TempDir(), FlowsDir: filepath.Join(base, "proj")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	res, err := run(t, m, `1.5`, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"a":150,"b":150,"c":150,"words":"hello","d":3,"pn":"pnpm"}`)
}

// The project is the flows file's folder when the handler lies in it; otherwise the nearest
// folder (the handler's or up to three above it, not past the temporary folder) that looks
// like a project; otherwise the handler's own folder.
func TestTheProjectRoot(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	tree(t, base, map[string]string{
		"app/flows.yaml":        "flows: []\n",
		"app/steps/deep/h.ts":   "",
		"lib/package.json":      "{}",
		"lib/src/handlers/h.ts": "",
		"loose/a/b/c/d/e/h.ts":  "",
		"loose/package.json":    "{}",
	})
	for _, c := range []struct{ entry, flowsDir, want string }{
		{"app/steps/deep/h.ts", "app", "app"},
		{"app/steps/deep/h.ts", "", "app"},
		{"lib/src/handlers/h.ts", "app", "lib"},
		{"loose/a/b/c/d/e/h.ts", "", "loose/a/b/c/d/e"},
	} {
		flowsDir := ""
		if c.flowsDir != "" {
			flowsDir = filepath.Join(base, c.flowsDir)
		}
		got, err := jshandler.ProjectRoot(filepath.Join(base, c.entry), flowsDir)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(base, c.want); got != want {
			t.Errorf("ProjectRoot(%s, %q) = %s, want %s", c.entry, c.flowsDir, got, want)
		}
	}
}

// A package.json in or above the temporary folder (anyone may write one there) makes no
// project of it: a handler in a folder of its own under it has that folder for project.
func TestTheProjectSearchStopsAtTheTemporaryFolder(t *testing.T) {
	base := t.TempDir()
	tree(t, base, map[string]string{"package.json": "{}", "tmp/package.json": "{}", "tmp/job/h.ts": ""})
	t.Setenv("TMPDIR", filepath.Join(base, "tmp"))
	got, err := jshandler.ProjectRoot(filepath.Join(base, "tmp/job/h.ts"), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "tmp/job"); got != want {
		t.Errorf("ProjectRoot = %s, want %s", got, want)
	}
}

// Imports written as Deno writes them resolve from the project's node_modules, through the
// same check: npm:pkg@version/sub, jsr:@scope/pkg (installed as itself or as npm's
// @jsr/scope__pkg), node:buffer and a package's bare require("buffer"); an npm: import of a
// package linked from outside the project is refused like any other.
func TestDenoSpecifiersResolveFromTheProject(t *testing.T) {
	t.Parallel()
	e, err := sandbox.New(sandbox.EngineWazero, sandbox.Config{CacheDir: sandbox.DefaultCacheDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	base := t.TempDir()
	tree(t, base, map[string]string{
		"outside/package.json":                          `{"name": "evil", "main": "index.js"}`,
		"outside/index.js":                              "export default '" + secret + "';\n",
		"proj/flows.yaml":                               "flows: []\n",
		"proj/node_modules/tiny/package.json":           `{"name": "tiny", "version": "1.2.3", "main": "index.js"}`,
		"proj/node_modules/tiny/index.js":               "export const twice = (n) => 2 * n;\n",
		"proj/node_modules/tiny/sub.js":                 "export const thrice = (n) => 3 * n;\n",
		"proj/node_modules/@jsr/std__path/package.json": `{"name": "@jsr/std__path", "main": "mod.js"}`,
		"proj/node_modules/@jsr/std__path/mod.js":       "export const join = (...p) => p.join('/');\n",
		"proj/node_modules/@scope/pkg/package.json":     `{"name": "@scope/pkg", "main": "index.js"}`,
		"proj/node_modules/@scope/pkg/index.js":         "export const scoped = 'yes';\n",
		"proj/node_modules/usesbuf/package.json":        `{"name": "usesbuf", "main": "index.js"}`,
		"proj/node_modules/usesbuf/index.js":            "const { Buffer } = require('buffer'); module.exports = (s) => Buffer.from(s).toString('hex');\n",
		"proj/node_modules/evil":                        "->../../outside",
		"proj/h.ts": `import { twice } from "npm:tiny@1.2.3";
import { thrice } from "npm:tiny@^1/sub.js";
import { join } from "jsr:@std/path@^1.0.0";
import { scoped } from "jsr:@scope/pkg";
import { Buffer } from "node:buffer";
import hex from "usesbuf";
export default async (n: number) => ({ a: twice(n), b: thrice(n), c: join("a", "b"), d: scoped, e: Buffer.from("hi").toString("base64"), f: hex("hi") });
`,
		"proj/evil.ts": "import v from \"npm:evil@1\";\nexport default async () => v;\n",
	})
	opts := jshandler.Options{CacheDir: t.TempDir(), FlowsDir: filepath.Join(base, "proj")}
	m, err := jshandler.Load(context.Background(), e, filepath.Join(base, "proj", "h.ts"), sandbox.ModuleConfig{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	res, err := run(t, m, `2`, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, res.Output, `{"a":4,"b":6,"c":"a/b","d":"yes","e":"aGk=","f":"6869"}`)
	_, err = jshandler.Load(context.Background(), e, filepath.Join(base, "proj", "evil.ts"), sandbox.ModuleConfig{}, opts)
	wantKind(t, err, sandbox.KindInvalidModule, `evil.ts:1:15: import of "npm:evil@1" refused`)
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("the refusal shows the file: %v", err)
	}
}
