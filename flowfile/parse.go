package flowfile

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
)

// Option ranges. pgflow itself accepts wider values; these catch typos (a timeout of
// 600000 seconds is almost certainly meant as milliseconds) while leaving real use open.
var (
	rangeMaxAttempts    = intRange{1, 100}
	rangeBaseDelay      = intRange{0, 86400}
	rangeTimeout        = intRange{1, 86400}
	rangeStartDelay     = intRange{0, 30 * 86400}
	rangeMaxConcurrency = intRange{1, 10000}
)

const (
	minMemoryLimit = 64 << 10 // one WebAssembly page
	maxMemoryLimit = 4 << 30  // the 32-bit address space
	maxSlugLen     = 128      // pgflow.is_valid_slug
	maxFlowSlugLen = 47       // pgmq queue names must be shorter than 48 characters
)

// slugRE is pgflow.is_valid_slug's pattern on every release (0.8.1 to 0.17 and main): letters
// of either case, digits and _, not starting with a digit.
var slugRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// slugRule is the rule pgflow 0.17 added to pgflow.is_valid_slug, said as a user reads it.
// Every version is held to it: a flow that an older pgflow takes would break on upgrade
// (the 0.17 migration fails on such rows) and cannot move to per-step queues. Neither rule
// asks for lower case; 0.17 asks for flow slugs unique ignoring case, and step slugs within a
// flow, which the parser checks on every version (pgmq lower-cases a queue's table names, so
// flows differing only in case would share a queue there too).
const slugRule = "pgflow 0.17+ requires a slug to start with a letter, end with a letter or digit, and hold no `__`"

// strictSlugProblem says what of slugRule a slug breaks; "" when none.
func strictSlugProblem(slug string) string {
	switch {
	case slug == "":
		return ""
	case !isLetter(slug[0]):
		return "it starts with " + strconv.Quote(slug[:1])
	case slug[len(slug)-1] == '_':
		return "it ends with _"
	case strings.Contains(slug, "__"):
		return "it holds __"
	}
	return ""
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

var (
	rootKeys = []string{"flows"}
	flowKeys = []string{"slug", "max_attempts", "base_delay", "timeout", "max_concurrency", "http", "env", "sql", "schedule", "steps"}
	stepKeys = []string{"slug", "type", "depends_on", "module", "max_attempts", "base_delay",
		"timeout", "start_delay", "memory_limit", "reuse_instance", "fuel", "deterministic", "http", "env", "sql", "if", "if_not", "when_unmet", "when_exhausted",
		"external"}
	// handlerKeys configure a step's handler: a step served elsewhere (external) has none.
	handlerKeys = []string{"module", "memory_limit", "reuse_instance", "fuel", "deterministic", "http", "env", "sql"}
)

// parser collects every problem in the file rather than stopping at the first, so a user
// fixes a broken file in one round.
type parser struct {
	file string // for messages
	dir  string // module paths are relative to it
	// bundleDir is the flows file's folder, from which a TypeScript handler or flow file may
	// import (jshandler.ProjectRoot); "" for flow files served without a flows file, whose
	// project is found from their own folder.
	bundleDir string
	errs      Errors
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// Parse validates the YAML in data. name is used in messages; dir resolves module paths.
func Parse(name, dir string, data []byte) (*File, error) {
	p := &parser{file: name, dir: dir, bundleDir: dir}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{yamlError(name, data, err)}
	}
	f := &File{Path: name}
	if len(doc.Content) == 0 {
		p.errorf(1, "the file is empty: it needs a top-level `flows:` list (see README)")
		return nil, p.errs
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "the top level must be a mapping with a `flows:` list, not %s", kindName(root))
		return nil, p.errs
	}
	var flowsNode *yaml.Node
	p.eachKey(root, rootKeys, "at the top level", func(key string, k, v *yaml.Node) {
		flowsNode = v
	})
	switch {
	case flowsNode == nil:
		p.errorf(root.Line, "missing `flows:` (a list of flows, each with a slug and steps)")
	case flowsNode.Kind != yaml.SequenceNode:
		p.errorf(flowsNode.Line, "`flows` must be a list (items start with `- slug: ...`), not %s", kindName(flowsNode))
	case len(flowsNode.Content) == 0:
		p.errorf(flowsNode.Line, "`flows` is empty: declare at least one flow")
	default:
		seen := map[string]*Flow{} // by lower-cased slug
		for _, n := range flowsNode.Content {
			var entry []*Flow
			if isDSLEntry(n) {
				entry = p.dslEntry(n)
			} else if fl := p.flow(n); fl != nil {
				entry = []*Flow{fl}
			}
			for _, fl := range entry {
				if prev, dup := seen[strings.ToLower(fl.Slug)]; dup {
					if prev.Slug == fl.Slug {
						p.errorf(fl.Line, "flow %q is declared twice (first at line %d): flow slugs must be unique", fl.Slug, prev.Line)
					} else {
						p.errorf(fl.Line, "flow %q differs from flow %q (line %d) only in case: they would share one pgmq queue (its tables are named in lower case), and pgflow 0.17+ requires flow slugs unique ignoring case",
							fl.Slug, prev.Slug, prev.Line)
					}
					continue
				}
				seen[strings.ToLower(fl.Slug)] = fl
				f.Flows = append(f.Flows, fl)
			}
		}
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return f, nil
}

func (p *parser) flow(n *yaml.Node) *Flow {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "each flow must be a mapping (`- slug: my_flow` followed by `steps:`, or `- flow: path/to/flow.ts`), not %s", kindName(n))
		return nil
	}
	fl := &Flow{Line: n.Line, MaxAttempts: DefaultMaxAttempts, BaseDelay: DefaultBaseDelay, Timeout: DefaultTimeout}
	var stepsNode *yaml.Node
	var defaults capabilityDefaults
	where := "in a flow"
	if s := mapValue(n, "slug"); s != nil && s.Kind == yaml.ScalarNode {
		where = fmt.Sprintf("in flow %q", s.Value)
	}
	p.eachKey(n, flowKeys, where, func(key string, k, v *yaml.Node) {
		switch key {
		case "slug":
			fl.Slug = p.flowSlug(v)
		case "max_attempts":
			p.intInto(v, key, rangeMaxAttempts, &fl.MaxAttempts)
		case "base_delay":
			p.intInto(v, key, rangeBaseDelay, &fl.BaseDelay)
		case "timeout":
			p.intInto(v, key, rangeTimeout, &fl.Timeout)
		case "max_concurrency":
			p.intInto(v, key, rangeMaxConcurrency, &fl.MaxConcurrency)
		case "http":
			defaults.http = p.http(k, v, "of flow "+strconv.Quote(fl.Slug))
		case "env":
			defaults.env = p.env(v)
		case "sql":
			defaults.sql = p.sql(k, v, "of flow "+strconv.Quote(fl.Slug))
		case "schedule":
			fl.Schedule, fl.ScheduleLine = p.schedule(fl.Slug, v), v.Line
		case "steps":
			stepsNode = v
		}
	})
	if mapValue(n, "slug") == nil {
		p.errorf(n.Line, "flow without a slug: add `slug: my_flow` (letters, digits, _)")
	}
	switch {
	case stepsNode == nil:
		p.errorf(n.Line, "flow %q has no `steps:` list", fl.Slug)
		return nil
	case stepsNode.Kind != yaml.SequenceNode:
		p.errorf(stepsNode.Line, "`steps` of flow %q must be a list (items start with `- slug: ...`), not %s", fl.Slug, kindName(stepsNode))
		return nil
	case len(stepsNode.Content) == 0:
		p.errorf(stepsNode.Line, "flow %q has no steps: declare at least one", fl.Slug)
		return nil
	}
	bySlug := map[string]*Step{}
	byLower := map[string]*Step{} // pgflow 0.17+ refuses step slugs that differ only in case
	var steps []*Step
	for _, sn := range stepsNode.Content {
		s := p.step(fl.Slug, sn, defaults)
		if s == nil || s.Slug == "" {
			continue
		}
		if prev, dup := bySlug[s.Slug]; dup {
			p.errorf(s.Line, "step %q is declared twice in flow %q (first at line %d): step slugs must be unique", s.Slug, fl.Slug, prev.Line)
			continue
		}
		if prev, dup := byLower[strings.ToLower(s.Slug)]; dup {
			p.errorf(s.Line, "step %q of flow %q differs from step %q (line %d) only in case: pgflow 0.17+ requires step slugs unique ignoring case",
				s.Slug, fl.Slug, prev.Slug, prev.Line)
			continue
		}
		bySlug[s.Slug] = s
		byLower[strings.ToLower(s.Slug)] = s
		steps = append(steps, s)
	}
	p.checkExternal(fl, steps)
	for _, s := range steps {
		for _, d := range s.DependsOn {
			if _, ok := bySlug[d]; !ok {
				p.errorf(s.Line, "step %q depends on %q, which flow %q does not declare%s", s.Slug, d, fl.Slug, suggest(d, keysOf(bySlug)))
			}
		}
		if s.Type == StepMap && len(s.DependsOn) > 1 {
			p.errorf(s.Line, "map step %q has %d dependencies: a map step maps over the flow input (no dependency) or over one step's array output (one dependency)", s.Slug, len(s.DependsOn))
		}
	}
	fl.Steps = p.topoOrder(fl, steps, bySlug)
	return fl
}

func (p *parser) step(flow string, n *yaml.Node, defaults capabilityDefaults) *Step {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "each step of flow %q must be a mapping (`- slug: my_step` with `module: path.wasm`), not %s", flow, kindName(n))
		return nil
	}
	s := &Step{Line: n.Line, Type: StepSingle, HTTP: defaults.http, Env: defaults.env, SQL: defaults.sql, FlowsDir: p.bundleDir}
	where := fmt.Sprintf("in a step of flow %q", flow)
	if v := mapValue(n, "slug"); v != nil && v.Kind == yaml.ScalarNode {
		where = fmt.Sprintf("in step %q of flow %q", v.Value, flow)
	}
	p.eachKey(n, stepKeys, where, func(key string, k, v *yaml.Node) {
		switch key {
		case "slug":
			s.Slug = p.stepSlug(v)
		case "type":
			if v.Kind != yaml.ScalarNode || (v.Value != StepSingle && v.Value != StepMap) {
				p.errorf(v.Line, "`type` must be `single` (the default) or `map`, not %s", kindName(v))
				return
			}
			s.Type = v.Value
		case "depends_on":
			s.DependsOn = p.dependsOn(v)
		case "module":
			s.ModuleLine = v.Line
			s.Module = p.module(v)
		case "max_attempts":
			s.MaxAttempts = p.optInt(v, key, rangeMaxAttempts)
		case "base_delay":
			s.BaseDelay = p.optInt(v, key, rangeBaseDelay)
		case "timeout":
			s.Timeout = p.optInt(v, key, rangeTimeout)
		case "start_delay":
			s.StartDelay = p.optInt(v, key, rangeStartDelay)
		case "memory_limit":
			s.MemoryLimit = p.memoryLimit(v)
		case "reuse_instance":
			s.ReuseInstance = p.boolean(v, key)
		case "deterministic":
			s.Deterministic = p.boolean(v, key)
		case "fuel":
			s.Fuel = p.fuel(v)
		case "http":
			s.HTTP = p.http(k, v, strings.Replace(where, "in ", "of ", 1))
		case "env":
			s.Env = p.env(v)
		case "sql":
			s.SQL = p.sql(k, v, strings.Replace(where, "in ", "of ", 1))
		case "if":
			s.If = p.pattern(key, v)
		case "if_not":
			s.IfNot = p.pattern(key, v)
		case "when_unmet":
			s.WhenUnmet = p.mode(key, v)
		case "when_exhausted":
			s.WhenExhausted = p.mode(key, v)
		case "external":
			s.External = p.boolean(v, key)
		}
	})
	if mapValue(n, "slug") == nil {
		p.errorf(n.Line, "step without a slug in flow %q: add `slug: my_step`", flow)
	}
	switch {
	case s.External:
		for _, key := range handlerKeys {
			if k := mapKey(n, key); k != nil {
				p.errorf(k.Line, "step %q of flow %q is `external: true` (served by another worker): it takes no `%s`", s.Slug, flow, key)
			}
		}
	case mapValue(n, "module") == nil:
		p.errorf(n.Line, "step %q of flow %q has no `module:` (the path of its .wasm module or .ts handler, relative to this file; or `external: true` "+
			"when another worker, such as pgflow's own, serves it)", s.Slug, flow)
	}
	return s
}

// checkExternal refuses a flow whose every step is served elsewhere: this worker would have
// nothing of it to serve.
func (p *parser) checkExternal(fl *Flow, steps []*Step) {
	for _, s := range steps {
		if !s.External {
			return
		}
	}
	if len(steps) > 0 {
		p.errorf(fl.Line, "every step of flow %q is `external: true`: pgflow-wasm would serve none of it; leave the flow out of this file", fl.Slug)
	}
}

// eachKey calls fn for every known key of a mapping and reports unknown and repeated keys.
func (p *parser) eachKey(n *yaml.Node, known []string, where string, fn func(key string, k, v *yaml.Node)) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if !contains(known, key) {
			p.errorf(k.Line, "unknown key %q %s%s; allowed keys: %s", key, where, suggest(key, known), strings.Join(known, ", "))
			continue
		}
		if seen[key] {
			p.errorf(k.Line, "key %q appears twice %s", key, where)
			continue
		}
		seen[key] = true
		fn(key, k, v)
	}
}

func (p *parser) flowSlug(v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		p.errorf(v.Line, "flow `slug` must be a name like order_pipeline, not %s", kindName(v))
		return ""
	}
	slug := v.Value
	switch {
	case !slugRE.MatchString(slug):
		p.errorf(v.Line, "flow slug %q: use letters, digits and _ (not starting with a digit), e.g. %q; the slug also names the pgmq queue", slug, fixSlug(slug))
	case strictSlugProblem(slug) != "":
		p.errorf(v.Line, "flow slug %q: %s: %s (e.g. %q)", slug, strictSlugProblem(slug), slugRule, strictSlug(slug))
	case len(slug) > maxFlowSlugLen:
		p.errorf(v.Line, "flow slug %q is %d characters: at most %d, because it names the pgmq queue and its tables", slug, len(slug), maxFlowSlugLen)
	case slug == "run":
		p.errorf(v.Line, "`run` is reserved by pgflow: choose another flow slug")
	}
	return slug
}

func (p *parser) stepSlug(v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		p.errorf(v.Line, "step `slug` must be a name like validate_order, not %s", kindName(v))
		return ""
	}
	slug := v.Value
	switch {
	case !slugRE.MatchString(slug):
		p.errorf(v.Line, "step slug %q: use letters, digits and _ (not starting with a digit), e.g. %q", slug, fixSlug(slug))
	case strictSlugProblem(slug) != "":
		p.errorf(v.Line, "step slug %q: %s: %s (e.g. %q)", slug, strictSlugProblem(slug), slugRule, strictSlug(slug))
	case len(slug) > maxSlugLen:
		p.errorf(v.Line, "step slug %q is %d characters: at most %d", slug, len(slug), maxSlugLen)
	case slug == "run":
		p.errorf(v.Line, "`run` is reserved: pgflow passes the flow input under the key \"run\"; choose another step slug")
	}
	return slug
}

func (p *parser) dependsOn(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v.Line, "`depends_on` must be a list of step slugs, e.g. [validate, fetch], not %s", kindName(v))
		return nil
	}
	var deps []string
	seen := map[string]bool{}
	for _, d := range v.Content {
		if d.Kind != yaml.ScalarNode || d.Value == "" {
			p.errorf(d.Line, "each entry of `depends_on` must be a step slug, not %s", kindName(d))
			continue
		}
		if seen[d.Value] {
			p.errorf(d.Line, "%q is listed twice in `depends_on`", d.Value)
			continue
		}
		seen[d.Value] = true
		deps = append(deps, d.Value)
	}
	return deps
}

func (p *parser) module(v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		p.errorf(v.Line, "`module` must be the path of a .wasm module or of a TypeScript or JavaScript handler (.ts, .mts, .js, .mjs), not %s", kindName(v))
		return ""
	}
	path := v.Value
	if !filepath.IsAbs(path) {
		path = filepath.Join(p.dir, path)
	}
	st, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
		hint := ""
		if strings.Contains(v.Value, "modules/examples/") {
			hint = " (the examples are built from source: run `make examples`)"
		}
		p.errorf(v.Line, "module %q not found (looked for %s; paths are relative to the flows file)%s", v.Value, path, hint)
	case err != nil:
		p.errorf(v.Line, "module %q: %v", v.Value, err)
	case st.IsDir():
		p.errorf(v.Line, "module %q is a folder: point at the .wasm or .ts file inside it", v.Value)
	}
	return path
}

func (p *parser) intInto(v *yaml.Node, key string, r intRange, dst *int) {
	if n := p.optInt(v, key, r); n != nil {
		*dst = *n
	}
}

func (p *parser) optInt(v *yaml.Node, key string, r intRange) *int {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		p.errorf(v.Line, "`%s` must be a whole number from %d to %d, not %s", key, r.min, r.max, kindName(v))
		return nil
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil || n < r.min || n > r.max {
		unit := ""
		if key != "max_attempts" && key != "max_concurrency" && key != "http.max_requests" {
			unit = " (seconds)"
		}
		p.errorf(v.Line, "`%s` is %s: it must be from %d to %d%s", key, v.Value, r.min, r.max, unit)
		return nil
	}
	return &n
}

func (p *parser) boolean(v *yaml.Node, key string) bool {
	if v.Kind != yaml.ScalarNode || (v.Value != "true" && v.Value != "false") {
		p.errorf(v.Line, "`%s` must be true or false, not %s", key, kindName(v))
		return false
	}
	return v.Value == "true"
}

// maxFuel keeps budgets far from the engines' 64-bit counters.
const maxFuel = 1 << 60

func (p *parser) fuel(v *yaml.Node) int64 {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		p.errorf(v.Line, "`fuel` must be a whole number of work units from 1 to %d (about one WebAssembly instruction each), not %s", int64(maxFuel), kindName(v))
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 0, 64)
	if err != nil || n < 1 || n > maxFuel {
		p.errorf(v.Line, "`fuel` is %s: it must be from 1 to %d units (about one WebAssembly instruction each)", v.Value, int64(maxFuel))
		return 0
	}
	return n
}

func (p *parser) memoryLimit(v *yaml.Node) uint64 {
	const want = "write a size like 512KiB, 32MiB or 1GiB (or a number of bytes)"
	if v.Kind != yaml.ScalarNode {
		p.errorf(v.Line, "`memory_limit` must be a size: %s", want)
		return 0
	}
	n, ok := bytesize.Parse(v.Value)
	if !ok {
		p.errorf(v.Line, "`memory_limit` %q is not a size: %s", v.Value, want)
		return 0
	}
	if n < minMemoryLimit || n > maxMemoryLimit {
		p.errorf(v.Line, "`memory_limit` %s is out of range: from 64KiB (one WebAssembly page) to 4GiB", v.Value)
		return 0
	}
	return n
}

// topoOrder returns the steps in dependency order (file order where free) and reports cycles.
func (p *parser) topoOrder(fl *Flow, steps []*Step, bySlug map[string]*Step) []*Step {
	done := map[string]bool{}
	var order []*Step
	for len(order) < len(steps) {
		progressed := false
		for _, s := range steps {
			if done[s.Slug] || !allDone(s.DependsOn, done, bySlug) {
				continue
			}
			done[s.Slug] = true
			order = append(order, s)
			progressed = true
		}
		if !progressed {
			var stuck []string
			line := 0
			for _, s := range steps {
				if !done[s.Slug] {
					stuck = append(stuck, s.Slug)
					if line == 0 {
						line = s.Line
					}
				}
			}
			p.errorf(line, "flow %q has a dependency cycle among steps %s: a step cannot depend on itself, directly or through others", fl.Slug, strings.Join(stuck, ", "))
			return steps
		}
	}
	return order
}

// allDone reports whether every dependency is placed; unknown dependencies (already
// reported) count as placed so they do not also show up as a cycle.
func allDone(deps []string, done map[string]bool, bySlug map[string]*Step) bool {
	for _, d := range deps {
		if _, known := bySlug[d]; known && !done[d] {
			return false
		}
	}
	return true
}

type intRange struct{ min, max int }

func mapKey(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		if n.Tag == "!!null" {
			return "an empty value"
		}
		return fmt.Sprintf("%q", n.Value)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func keysOf(m map[string]*Step) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// fixSlug turns an invalid slug into a valid suggestion (order-pipeline -> order_pipeline).
func fixSlug(s string) string { return strictSlug(s) }

// strictSlug turns s into a slug every pgflow takes: letters, digits and single _ between
// them, starting with a letter.
func strictSlug(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	out := strings.TrimRight(b.String(), "_")
	switch {
	case out == "":
		return "my_slug"
	case !isLetter(out[0]):
		return "n" + out
	}
	return out
}
