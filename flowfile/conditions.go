package flowfile

import (
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"
)

// Step conditions (pgflow 0.14): a step runs only when its input matches `if` and does not
// match `if_not`, both JSON objects matched by containment (jsonb @>) against the run input
// for a root step, or against the object of its dependencies' outputs for a dependent step.
// `when_unmet` says what an unmatched condition does; `when_exhausted` what a step does
// whose task used up its attempts.

// Condition modes.
const (
	Skip        = "skip"         // the step is skipped; dependents see no key for it
	SkipCascade = "skip-cascade" // the step and every step after it are skipped
	Fail        = "fail"         // the step and the run fail
)

// HasConditions reports whether the step uses any pgflow 0.14 condition key.
func (s *Step) HasConditions() bool {
	return s.If != nil || s.IfNot != nil || s.WhenUnmet != "" || s.WhenExhausted != ""
}

// pattern reads `if` / `if_not`: a mapping, written as JSON (in YAML flow style) or YAML.
func (p *parser) pattern(key string, v *yaml.Node) json.RawMessage {
	if v.Kind != yaml.MappingNode {
		p.errorf(v.Line, "`%s` must be a JSON object matched by containment against the step's input, e.g. `%s: {\"plan\": \"pro\"}`, not %s",
			key, key, kindName(v))
		return nil
	}
	var x any
	if err := v.Decode(&x); err != nil {
		p.errorf(v.Line, "`%s`: %v", key, err)
		return nil
	}
	b, err := json.Marshal(jsonable(x))
	if err != nil {
		p.errorf(v.Line, "`%s` is not JSON: %v (keys must be strings)", key, err)
		return nil
	}
	return b
}

// jsonable turns what yaml.v3 decodes (maps with any keys) into what encoding/json takes.
func jsonable(x any) any {
	switch t := x.(type) {
	case map[string]any:
		for k, v := range t {
			t[k] = jsonable(v)
		}
		return t
	case map[any]any:
		m := map[string]any{}
		for k, v := range t {
			m[fmt.Sprint(k)] = jsonable(v)
		}
		return m
	case []any:
		for i, v := range t {
			t[i] = jsonable(v)
		}
		return t
	}
	return x
}

// mode reads `when_unmet` or `when_exhausted`.
func (p *parser) mode(key string, v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode && (v.Value == Skip || v.Value == SkipCascade || v.Value == Fail) {
		return v.Value
	}
	p.errorf(v.Line, "`%s` must be skip, skip-cascade or fail, not %s", key, kindName(v))
	return ""
}
