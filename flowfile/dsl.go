package flowfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// What pgflow.create_flow stores for an option a @pgflow/dsl Flow leaves out (its compileFlow
// then leaves the argument out): the same on pgflow 0.8.1, 0.14.1 and main. Note the base
// delay: 5, where flows.yaml's default is 1.
const (
	dslDefaultMaxAttempts = 3
	dslDefaultBaseDelay   = 5
	dslDefaultTimeout     = 60
)

var (
	// dslEntryKeys are the keys of a `- flow: file.ts` entry: what a Flow cannot say.
	dslEntryKeys = []string{"flow", "max_concurrency", "http", "env", "sql", "schedule", "steps"}
	// dslStepKeys configure a step of a flow file by its slug; the rest of a step (its
	// type, dependencies, options, handler) is the file's.
	dslStepKeys = []string{"memory_limit", "reuse_instance", "fuel", "deterministic", "http", "env", "sql", "external"}
)

// isDSLEntry reports whether a flows.yaml entry names a flow file rather than declaring a flow.
func isDSLEntry(n *yaml.Node) bool {
	return n.Kind == yaml.MappingNode && mapKey(n, "flow") != nil
}

// dslEntry reads a `- flow: path` entry: every Flow of @pgflow/dsl the file (or each file the
// glob matches) exports, its shape read from the file evaluated in the sandbox, and what the
// entry adds per step (keyed by step slug under `steps:`).
func (p *parser) dslEntry(n *yaml.Node) []*Flow {
	var (
		fileNode, stepsNode, schedNode *yaml.Node
		maxConc                        int
		defaults                       capabilityDefaults
	)
	p.eachKey(n, dslEntryKeys, "in a `flow:` entry", func(key string, k, v *yaml.Node) {
		switch key {
		case "flow":
			fileNode = v
		case "max_concurrency":
			p.intInto(v, key, rangeMaxConcurrency, &maxConc)
		case "http":
			defaults.http = p.http(k, v, "of the flows of this `flow:` entry")
		case "env":
			defaults.env = p.env(v)
		case "sql":
			defaults.sql = p.sql(k, v, "of the flows of this `flow:` entry")
		case "schedule":
			schedNode = v
		case "steps":
			stepsNode = v
		}
	})
	for _, key := range []string{"slug", "max_attempts", "base_delay", "timeout"} {
		if k := mapKey(n, key); k != nil {
			p.errorf(k.Line, "`%s` of a flow file's flow is the file's own: set it in `new Flow({ ... })` (see docs/flows.md)", key)
		}
	}
	files := p.flowFiles(fileNode)
	overrides := map[string]*yaml.Node{} // by step slug
	used := map[string]bool{}
	var order []*yaml.Node
	if stepsNode != nil {
		if stepsNode.Kind != yaml.MappingNode {
			p.errorf(stepsNode.Line, "`steps` of a `flow:` entry must be a mapping from step slug to what the step may do (`website: {http: ...}`), not %s", kindName(stepsNode))
		} else {
			for i := 0; i+1 < len(stepsNode.Content); i += 2 {
				k, v := stepsNode.Content[i], stepsNode.Content[i+1]
				if v.Kind != yaml.MappingNode {
					p.errorf(v.Line, "step %q of a `flow:` entry must be a mapping of %s, not %s", k.Value, strings.Join(dslStepKeys, ", "), kindName(v))
					continue
				}
				if _, dup := overrides[k.Value]; dup {
					p.errorf(k.Line, "step %q appears twice under `steps`", k.Value)
					continue
				}
				overrides[k.Value] = v
				order = append(order, k)
			}
		}
	}
	var flows []*Flow
	allSlugs := map[string]bool{}
	for _, file := range files {
		shapes, err := jshandler.DescribeFlowFile(context.Background(), file, p.bundleDir, jshandler.Options{})
		if err != nil {
			msg := err.Error()
			var se *sandbox.Error
			if errors.As(err, &se) {
				msg = se.Message
			}
			p.errorf(fileNode.Line, "flow file %s: %s", p.rel(file), msg)
			continue
		}
		if len(shapes) == 0 {
			p.errorf(fileNode.Line, "flow file %s exports no Flow of @pgflow/dsl: export the flow (`export default new Flow({ slug: ... })...` or `export const MyFlow = new Flow(...)`)", p.rel(file))
			continue
		}
		for _, sh := range shapes {
			fl := p.dslFlow(n, fileNode, file, sh, overrides, defaults)
			if fl == nil {
				continue
			}
			for _, s := range sh.Steps {
				allSlugs[s.Slug] = true
				if _, ok := overrides[s.Slug]; ok {
					used[s.Slug] = true
				}
			}
			fl.MaxConcurrency = maxConc
			flows = append(flows, fl)
		}
	}
	if schedNode != nil {
		if len(flows) == 1 {
			flows[0].Schedule, flows[0].ScheduleLine = p.schedule(flows[0].Slug, schedNode), schedNode.Line
		} else if len(flows) > 1 {
			p.errorf(schedNode.Line, "`schedule` of a `flow:` entry that serves %d flows: give each scheduled flow a file (or an entry) of its own", len(flows))
		}
	}
	if len(flows) > 0 {
		for _, k := range order {
			if !used[k.Value] {
				p.errorf(k.Line, "step %q is not a step of %s%s", k.Value, p.describeFlows(flows), suggest(k.Value, keysOfSet(allSlugs)))
			}
		}
	}
	return flows
}

// flowFiles resolves the `flow:` value: a file, or a glob of files, relative to the flows file.
func (p *parser) flowFiles(v *yaml.Node) []string {
	if v == nil {
		return nil
	}
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		p.errorf(v.Line, "`flow` must be the path of a @pgflow/dsl flow file (.ts, .mts, .js, .mjs) or a glob of them, not %s", kindName(v))
		return nil
	}
	pattern := v.Value
	if !filepath.IsAbs(pattern) {
		pattern = filepath.Join(p.dir, pattern)
	}
	matches, err := filepath.Glob(pattern)
	if err != nil {
		p.errorf(v.Line, "`flow` %q is not a valid glob: %v", v.Value, err)
		return nil
	}
	var files []string
	for _, m := range matches {
		if jshandler.IsSource(m) && !strings.HasSuffix(m, ".d.ts") {
			files = append(files, m)
		}
	}
	if len(files) == 0 {
		p.errorf(v.Line, "flow file %q not found (looked for %s; paths are relative to the flows file)", v.Value, pattern)
	}
	return files
}

// dslFlow turns one Flow's shape into a flow whose steps' handlers are the file's.
func (p *parser) dslFlow(entry, fileNode *yaml.Node, file string, sh jshandler.FlowShape, overrides map[string]*yaml.Node, defaults capabilityDefaults) *Flow {
	line := fileNode.Line
	text, _ := os.ReadFile(file)
	flowLine, after := slugLine(text, sh.Slug, 0)
	where := fmt.Sprintf("flow %q of %s", sh.Slug, p.rel(file)+flowLine)
	slug := p.flowSlug(&yaml.Node{Kind: yaml.ScalarNode, Value: sh.Slug, Line: line})
	fl := &Flow{Slug: slug, Line: entry.Line, FlowFile: file,
		MaxAttempts: dslDefaultMaxAttempts, BaseDelay: dslDefaultBaseDelay, Timeout: dslDefaultTimeout}
	opts := p.dslOptions(line, where, sh.Options, false)
	if opts.maxAttempts != nil {
		fl.MaxAttempts = *opts.maxAttempts
	}
	if opts.baseDelay != nil {
		fl.BaseDelay = *opts.baseDelay
	}
	if opts.timeout != nil {
		fl.Timeout = *opts.timeout
	}
	if len(sh.Steps) == 0 {
		p.errorf(line, "%s has no steps: add at least one (`.step({ slug: ... }, handler)`)", where)
	}
	bySlug := map[string]*Step{}
	for _, ds := range sh.Steps {
		// Steps are defined after their flow, in order: each is looked for past the one before.
		stepLine, end := slugLine(text, ds.Slug, after)
		if stepLine != "" {
			after = end
		}
		swhere := fmt.Sprintf("step %q of flow %q (%s)", ds.Slug, sh.Slug, p.rel(file)+stepLine)
		if len(ds.Unknown) > 0 {
			p.errorf(line, "%s has %s, which pgflow-wasm does not know (a newer @pgflow/dsl than it was built with?): it would not serve the step as pgflow does", swhere, strings.Join(ds.Unknown, ", "))
		}
		ov := overrides[ds.Slug]
		// The step as a flows.yaml step: its slug, its handler (the flow file) and the
		// entry's keys for it, which keep their lines for messages.
		sn := &yaml.Node{Kind: yaml.MappingNode, Line: line}
		sline := line
		if ov != nil {
			sline = ov.Line
			sn.Line = ov.Line
		}
		sn.Content = append(sn.Content, scalar("slug", sline), scalar(ds.Slug, sline))
		external := false
		if ov != nil {
			for i := 0; i+1 < len(ov.Content); i += 2 {
				k := ov.Content[i]
				if !slices.Contains(dslStepKeys, k.Value) {
					p.errorf(k.Line, "unknown key %q for %s%s; a flow file's step takes only %s (its type, dependencies and options are the file's)",
						k.Value, swhere, suggest(k.Value, dslStepKeys), strings.Join(dslStepKeys, ", "))
					continue
				}
				if k.Value == "external" && ov.Content[i+1].Value == "true" {
					external = true
				}
				sn.Content = append(sn.Content, k, ov.Content[i+1])
			}
		}
		if !external {
			sn.Content = append(sn.Content, scalar("module", sline), scalar(file, sline))
			if !ds.Handler {
				p.errorf(line, "%s has no handler function", swhere)
			}
		}
		s := p.step(slug, sn, defaults)
		if s == nil {
			continue
		}
		s.FlowFile = !external
		s.Type = StepSingle
		if ds.Type == StepMap {
			s.Type = StepMap
		} else if ds.Type != StepSingle {
			p.errorf(line, "%s is of type %q, which pgflow-wasm does not know", swhere, ds.Type)
		}
		s.DependsOn = ds.DependsOn
		so := p.dslOptions(line, swhere, ds.Options, true)
		s.MaxAttempts, s.BaseDelay, s.Timeout, s.StartDelay = so.maxAttempts, so.baseDelay, so.timeout, so.startDelay
		if _, dup := bySlug[s.Slug]; dup {
			p.errorf(line, "%s is defined twice", swhere)
			continue
		}
		bySlug[s.Slug] = s
		fl.Steps = append(fl.Steps, s)
	}
	p.checkExternal(fl, fl.Steps)
	for _, s := range fl.Steps {
		for _, d := range s.DependsOn {
			if bySlug[d] == nil {
				p.errorf(line, "step %q of %s depends on %q, which the flow does not define", s.Slug, where, d)
			}
		}
	}
	return fl
}

type dslOptions struct{ maxAttempts, baseDelay, timeout, startDelay *int }

// dslOptions reads a Flow's or a step's options as the DSL holds them (camelCase numbers).
func (p *parser) dslOptions(line int, where string, opts map[string]any, step bool) dslOptions {
	var o dslOptions
	known := map[string]struct {
		dst **int
		r   intRange
		key string
	}{
		"maxAttempts": {&o.maxAttempts, rangeMaxAttempts, "maxAttempts"},
		"baseDelay":   {&o.baseDelay, rangeBaseDelay, "baseDelay"},
		"timeout":     {&o.timeout, rangeTimeout, "timeout"},
	}
	if step {
		known["startDelay"] = struct {
			dst **int
			r   intRange
			key string
		}{&o.startDelay, rangeStartDelay, "startDelay"}
	}
	for k, v := range opts {
		kn, ok := known[k]
		if !ok {
			p.errorf(line, "%s has the option %s, which pgflow-wasm does not know", where, k)
			continue
		}
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || f < float64(kn.r.min) || f > float64(kn.r.max) {
			p.errorf(line, "%s: option %s is %v: it must be a whole number from %d to %d", where, k, v, kn.r.min, kn.r.max)
			continue
		}
		n := int(f)
		*kn.dst = &n
	}
	return o
}

// slugLine is ":N", the line of the flow file's text where a flow or step is given slug
// (`slug: 'x'`) at or after byte from, and the end of that text; "" when the text does not
// say it so (a slug computed at run time). For messages about what the file defines.
func slugLine(text []byte, slug string, from int) (string, int) {
	re := regexp.MustCompile(`slug\s*:\s*['"` + "`" + `]` + regexp.QuoteMeta(slug) + `['"` + "`" + `]`)
	loc := re.FindIndex(text[from:])
	if loc == nil {
		return "", from
	}
	return ":" + strconv.Itoa(1+bytes.Count(text[:from+loc[0]], []byte("\n"))), from + loc[1]
}

func scalar(value string, line int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, Line: line}
}

// rel names a file relative to the flows file's folder when it lies there.
func (p *parser) rel(file string) string {
	if r, err := filepath.Rel(p.dir, file); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return file
}

func (p *parser) describeFlows(flows []*Flow) string {
	names := make([]string, len(flows))
	for i, f := range flows {
		names[i] = strconv.Quote(f.Slug)
	}
	if len(flows) == 1 {
		return "flow " + names[0] + " (" + p.rel(flows[0].FlowFile) + ")"
	}
	return "flows " + strings.Join(names, ", ")
}

func keysOfSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
