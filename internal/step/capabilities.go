package step

import (
	"log/slog"
	"os"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/telemetry"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// Capabilities turns a step's `http` and `env` into the sandbox's grant. Values of env
// names are read from the worker's environment once, here; a listed name that is not set
// is logged (by name) and makes config_get fail with a message saying so.
func Capabilities(file *flowfile.File, fl *flowfile.Flow, s *flowfile.Step, m *telemetry.Metrics, log *slog.Logger) sandbox.Capabilities {
	caps := sandbox.Capabilities{Step: s.Where(file, fl), Env: sandbox.NewEnv(s.Env, os.LookupEnv)}
	if s.HTTP != nil {
		caps.HTTP = s.HTTP.Policy()
	}
	if obs := m.HTTPObserver(fl.Slug, s.Slug); obs != nil {
		caps.Observer = obs
	}
	if unset := caps.Env.Unset(); len(unset) > 0 {
		log.Warn("environment variables the step's env lists are not set: its handler's config calls for them fail",
			"flow", fl.Slug, "step", s.Slug, "unset", unset)
	}
	return caps
}
