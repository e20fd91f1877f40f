package flowfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// IsFlowSource reports whether path names a file that may be a @pgflow/dsl flow file
// (.ts, .mts, .js, .mjs; not a .d.ts declaration).
func IsFlowSource(path string) bool {
	return jshandler.IsSource(path) && !strings.HasSuffix(path, ".d.ts")
}

// loadFlowFiles serves @pgflow/dsl flow files without a flows file: path is a folder (every
// Flow that each of its flow files exports; a file that exports none, a helper, is left out)
// or one flow file (it must export a Flow). Every flow gets what a `- flow:` entry without
// keys gives it: the file's shape and options, and no capability.
func loadFlowFiles(path string, folder bool) (*File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir, files := filepath.Dir(abs), []string{abs}
	if folder {
		dir, files = abs, nil
		entries, err := os.ReadDir(abs)
		if err != nil {
			return nil, Errors{{File: path, Msg: err.Error()}}
		}
		for _, e := range entries {
			if !e.IsDir() && IsFlowSource(e.Name()) {
				files = append(files, filepath.Join(abs, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, Errors{{File: path, Msg: "the folder holds no flow file (.ts, .mts, .js, .mjs): give --flows a folder of @pgflow/dsl flow files, a flow file, or a flows.yaml"}}
		}
	}
	// The project a flow file imports from is found from its own folder (package.json,
	// node_modules), as for a handler no flows file names: bundleDir "".
	p := &parser{file: path, dir: dir}
	f := &File{Path: path, WithoutFlowsFile: true}
	type served struct {
		flow  *Flow
		shape string
	}
	seen := map[string]served{} // by lower-cased slug
	for _, file := range files {
		p.file = displayPath(path, file, folder)
		shapes, err := jshandler.DescribeFlowFile(context.Background(), file, "", jshandler.Options{})
		if err != nil {
			msg := err.Error()
			if se := (*sandbox.Error)(nil); errors.As(err, &se) {
				msg = se.Message
			}
			p.errorf(0, "%s", msg)
			continue
		}
		if len(shapes) == 0 && !folder {
			p.errorf(0, "exports no Flow of @pgflow/dsl: export the flow (`export default new Flow({ slug: ... })...` or `export const MyFlow = new Flow(...)`), or give --flows a flows.yaml")
		}
		for _, sh := range shapes {
			shape, _ := json.Marshal(struct {
				Slug    string
				Options map[string]any
				Steps   []jshandler.FlowStepShape
			}{sh.Slug, sh.Options, sh.Steps})
			if prev, dup := seen[strings.ToLower(sh.Slug)]; dup {
				// A file that re-exports another's flow (an index.ts of the folder) serves it once.
				if prev.flow.Slug != sh.Slug || prev.shape != string(shape) {
					p.errorf(0, "flow %q is also defined by %s, differently: flow slugs must be unique (ignoring case, on pgflow 0.17+)", sh.Slug, p.rel(prev.flow.FlowFile))
				}
				continue
			}
			fileNode := &yaml.Node{Kind: yaml.ScalarNode, Value: file}
			if fl := p.dslFlow(&yaml.Node{Kind: yaml.MappingNode}, fileNode, file, sh, nil, capabilityDefaults{}); fl != nil {
				seen[strings.ToLower(sh.Slug)] = served{fl, string(shape)}
				f.Flows = append(f.Flows, fl)
			}
		}
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	if len(f.Flows) == 0 {
		return nil, Errors{{File: path, Msg: "no file of the folder exports a Flow of @pgflow/dsl (`export default new Flow({ slug: ... })...`)"}}
	}
	return f, nil
}

// displayPath names a flow file in messages: as given for one file, else the folder as given
// joined with the file's name.
func displayPath(given, file string, folder bool) string {
	if !folder {
		return given
	}
	return filepath.Join(given, filepath.Base(file))
}

// whereWithoutFlowsFile names a step of a flow served from its file alone, for refusals of a
// capability: what grants it is a flows file, which the user does not have yet.
func (s *Step) whereWithoutFlowsFile(fl *Flow) string {
	file := fl.FlowFile
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, file); err == nil && !strings.HasPrefix(r, "..") {
			file = r
		}
	}
	return fmt.Sprintf("step %q of flow %q (%s, served without a flows.yaml: grant it in a flows.yaml `- flow:` entry, under `steps: {%s: ...}`)",
		s.Slug, fl.Slug, file, s.Slug)
}
