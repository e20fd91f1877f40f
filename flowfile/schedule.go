package flowfile

import (
	"encoding/json"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/internal/schedule"
)

var scheduleKeys = []string{"cron", "timezone", "input", "missed"}

// schedule reads a flow's `schedule:`: a cron expression, or a mapping with `cron` and the
// optional `timezone`, `input` (any JSON, the runs' input; default {}) and `missed` (none or
// one: what a worker that comes back does about ticks no worker ran).
func (p *parser) schedule(flow string, v *yaml.Node) *schedule.Spec {
	var expr, zone string
	var input json.RawMessage
	catchUp := false
	exprLine := v.Line
	switch v.Kind {
	case yaml.ScalarNode:
		expr = v.Value
	case yaml.MappingNode:
		p.eachKey(v, scheduleKeys, "in the schedule of flow "+quote(flow), func(key string, k, val *yaml.Node) {
			switch key {
			case "cron":
				expr, exprLine = val.Value, val.Line
			case "timezone":
				zone = val.Value
			case "input":
				var x any
				if err := val.Decode(&x); err != nil {
					p.errorf(val.Line, "schedule `input`: %v", err)
					return
				}
				b, err := json.Marshal(jsonable(x))
				if err != nil {
					p.errorf(val.Line, "schedule `input` is not JSON: %v (keys must be strings)", err)
					return
				}
				input = b
			case "missed":
				switch val.Value {
				case "none":
				case "one":
					catchUp = true
				default:
					p.errorf(val.Line, "schedule `missed` must be `none` (the default: ticks no worker ran start nothing) or `one` (one catch-up run), not %q", val.Value)
				}
			}
		})
		if mapValue(v, "cron") == nil {
			p.errorf(v.Line, "the schedule of flow %q has no `cron:` (e.g. cron: \"*/5 * * * *\")", flow)
			return nil
		}
	default:
		p.errorf(v.Line, "`schedule` must be a cron expression (e.g. \"*/5 * * * *\") or a mapping with `cron`, `timezone`, `input`, `missed`, not %s", kindName(v))
		return nil
	}
	spec, err := schedule.Parse(expr, zone, input, catchUp)
	if err != nil {
		p.errorf(exprLine, "flow %q: schedule: %v", flow, err)
		return nil
	}
	return spec
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }
