package flowfile

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"
)

// cronParser takes standard 5-field expressions, an optional leading seconds field, and
// descriptors (@hourly, @every 10m).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a flow's `schedule:`, parsed: when its runs start, and with what input. The
// worker starts them (internal/schedule), once per tick across workers.
type Schedule struct {
	Cron     string
	Location *time.Location
	Input    json.RawMessage // the input of every run it starts
	CatchUp  bool            // missed: one
	sched    cron.Schedule
}

// ParseSchedule checks a cron expression and a time zone name ("" is UTC); input is every
// run's (nil: {}), catchUp is `missed: one`.
func ParseSchedule(expr, zone string, input json.RawMessage, catchUp bool) (*Schedule, error) {
	loc := time.UTC
	if zone != "" {
		var err error
		if loc, err = time.LoadLocation(zone); err != nil {
			return nil, fmt.Errorf("time zone %q: %v (use an IANA name such as Europe/Berlin, or UTC)", zone, err)
		}
	}
	if strings.HasPrefix(strings.TrimSpace(expr), "CRON_TZ=") || strings.HasPrefix(strings.TrimSpace(expr), "TZ=") {
		return nil, fmt.Errorf("cron %q: give the time zone as `timezone:`, not inside the expression", expr)
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v (five fields, minute hour day-of-month month day-of-week, e.g. \"*/5 * * * *\"; a sixth, leading field is seconds)", expr, err)
	}
	if input == nil {
		input = json.RawMessage(`{}`)
	}
	return &Schedule{Cron: expr, Location: loc, Input: input, CatchUp: catchUp, sched: sched}, nil
}

// Next is the first tick after t. An interval (`@every 10s`) ticks at the multiples of it
// since the Unix epoch, like a cron expression on the wall clock: every worker computes the
// same ticks, whenever it started, so they claim each tick once between them
// (internal/schedule).
func (s *Schedule) Next(t time.Time) time.Time {
	if every, ok := s.sched.(cron.ConstantDelaySchedule); ok {
		d := int64(every.Delay)
		n := t.UnixNano()
		next := (n/d + 1) * d
		if n < 0 && n%d != 0 {
			next -= d // division truncates toward zero
		}
		return time.Unix(0, next).In(s.Location)
	}
	return s.sched.Next(t.In(s.Location))
}

var scheduleKeys = []string{"cron", "timezone", "input", "missed"}

// schedule reads a flow's `schedule:`: a cron expression, or a mapping with `cron` and the
// optional `timezone`, `input` (any JSON, the runs' input; default {}) and `missed` (none or
// one: what a worker that comes back does about ticks no worker ran).
func (p *parser) schedule(flow string, v *yaml.Node) *Schedule {
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
	spec, err := ParseSchedule(expr, zone, input, catchUp)
	if err != nil {
		p.errorf(exprLine, "flow %q: schedule: %v", flow, err)
		return nil
	}
	return spec
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }
