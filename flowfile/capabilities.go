package flowfile

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// HTTP is a step's `http` section: the outbound HTTP its handler may make.
type HTTP struct {
	Allow            []httpcap.Pattern
	MaxResponseBytes int64 // default httpcap.DefaultMaxResponseBytes
	MaxRequestBytes  int64 // default httpcap.DefaultMaxRequestBytes
	MaxRequests      int   // per task, redirect hops included; default httpcap.DefaultMaxRequests
	Line             int   // of the `http` key (the step's, or the flow's it inherits)
}

// Policy is the sandbox's view of the section.
func (h *HTTP) Policy() *httpcap.Policy {
	return &httpcap.Policy{Allow: h.Allow, MaxRequests: h.MaxRequests,
		MaxRequestBytes: h.MaxRequestBytes, MaxResponseBytes: h.MaxResponseBytes}
}

var (
	httpKeys = []string{"allow", "max_response_bytes", "max_request_bytes", "max_requests"}

	rangeMaxRequests = intRange{1, 10000}

	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// libpqEnvRE matches libpq's variables (PGPASSWORD, PGHOST, ...): the worker's own.
	libpqEnvRE = regexp.MustCompile(`^PG[A-Z]+$|^PGCONNECT_TIMEOUT$`)
)

const maxHTTPBytes = 1 << 30

// http reads an `http` value: a mapping, or false for none (a step's way to drop its
// flow's default). It returns nil for false and for a section with errors.
func (p *parser) http(k, v *yaml.Node, where string) *HTTP {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" && v.Value == "false" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		p.errorf(v.Line, "`http` must be a mapping like {allow: [\"api.example.com\"]}, or false for no HTTP, not %s", kindName(v))
		return nil
	}
	h := &HTTP{Line: k.Line, MaxRequests: httpcap.DefaultMaxRequests,
		MaxResponseBytes: httpcap.DefaultMaxResponseBytes, MaxRequestBytes: httpcap.DefaultMaxRequestBytes}
	errs := len(p.errs)
	p.eachKey(v, httpKeys, "in `http` "+where, func(key string, k, val *yaml.Node) {
		switch key {
		case "allow":
			h.Allow = p.allowList(val)
		case "max_response_bytes":
			h.MaxResponseBytes = p.httpSize(val, "http.max_response_bytes")
		case "max_request_bytes":
			h.MaxRequestBytes = p.httpSize(val, "http.max_request_bytes")
		case "max_requests":
			p.intInto(val, "http.max_requests", rangeMaxRequests, &h.MaxRequests)
		}
	})
	if mapValue(v, "allow") == nil {
		p.errorf(k.Line, "`http` %s has no `allow` list: name the hosts the handler may reach, e.g. allow: [\"api.example.com\", \"127.0.0.1:8080\"]", where)
	}
	if len(p.errs) > errs {
		return nil
	}
	return h
}

func (p *parser) allowList(v *yaml.Node) []httpcap.Pattern {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		p.errorf(v.Line, "`http.allow` must be a list of host[:port] entries, e.g. [\"api.example.com\", \"*.example.com:8443\", \"127.0.0.1:8080\"], not %s", kindName(v))
		return nil
	}
	var out []httpcap.Pattern
	seen := map[string]bool{}
	for _, e := range v.Content {
		if e.Kind != yaml.ScalarNode {
			p.errorf(e.Line, "each `http.allow` entry must be a host[:port] like \"api.example.com\", not %s", kindName(e))
			continue
		}
		pat, err := httpcap.ParsePattern(e.Value)
		if err != nil {
			p.errorf(e.Line, "`http.allow` entry %v", err)
			continue
		}
		if seen[strings.ToLower(e.Value)] {
			p.errorf(e.Line, "%q is listed twice in `http.allow`", e.Value)
			continue
		}
		seen[strings.ToLower(e.Value)] = true
		out = append(out, pat)
	}
	return out
}

func (p *parser) httpSize(v *yaml.Node, key string) int64 {
	const want = "write a size like 512KiB, 1MiB or 16MiB (or a number of bytes), up to 1GiB"
	if v.Kind != yaml.ScalarNode {
		p.errorf(v.Line, "`%s` must be a size: %s", key, want)
		return 0
	}
	n, ok := bytesize.Parse(v.Value)
	if !ok || n < 1 || n > maxHTTPBytes {
		p.errorf(v.Line, "`%s` %q is not a size from 1 byte to 1GiB: %s", key, v.Value, want)
		return 0
	}
	return int64(n)
}

// env reads an `env` list: names of the worker's environment variables the handler may
// read with config_get. The worker's own credentials cannot be listed.
func (p *parser) env(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v.Line, "`env` must be a list of environment variable names, e.g. [STRIPE_KEY], not %s", kindName(v))
		return nil
	}
	names := []string{}
	seen := map[string]bool{}
	for _, n := range v.Content {
		name := n.Value
		switch {
		case n.Kind != yaml.ScalarNode || !envNameRE.MatchString(name):
			p.errorf(n.Line, "each `env` entry must be an environment variable name (letters, digits and _, not starting with a digit), not %s", kindName(n))
		case name == "DATABASE_URL" || strings.HasPrefix(name, "PGFLOW_WASM_") || libpqEnvRE.MatchString(name):
			p.errorf(n.Line, "`env` may not list %s: it configures the worker itself (its database credentials or flags), and handlers get only values meant for them", name)
		case seen[name]:
			p.errorf(n.Line, "%s is listed twice in `env`", name)
		default:
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// capabilityDefaults are a flow's `http` and `env`, inherited by steps without their own.
type capabilityDefaults struct {
	http    *HTTP
	env     []string
	envLine int
	sql     *SQL
}

// Where names a step in capability messages: `step "charge" of flow "orders" (flows.yaml:12)`,
// with the line of its http key (its own or its flow's).
func (s *Step) Where(f *File, fl *Flow) string {
	if f.WithoutFlowsFile {
		return s.whereWithoutFlowsFile(fl)
	}
	line := s.Line
	if s.HTTP != nil {
		line = s.HTTP.Line
	}
	return fmt.Sprintf("step %q of flow %q (%s:%s)", s.Slug, fl.Slug, f.Path, strconv.Itoa(line))
}
