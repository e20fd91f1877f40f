package dashboard

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
	"github.com/pgflow-wasm/pgflow-wasm/internal/step"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// LoadModules loads every step's module of file with engine, as the worker would, to learn
// what the flows page shows of it (sha256, size, mode, ABI version), then closes it. A
// worker that already holds its modules passes its own ModuleInfo instead (serve --ui-addr).
func LoadModules(ctx context.Context, file *flowfile.File, engine sandbox.Engine) (ModuleInfo, error) {
	infos := map[[2]string]sandbox.Info{}
	for _, fl := range file.Flows {
		for _, s := range fl.Served() { // an external step has no module here
			m, err := step.Load(ctx, engine, file, fl, s, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: flow %q step %q: %w", file.Path, s.ModuleLine, fl.Slug, s.Slug, err)
			}
			infos[[2]string{fl.Slug, s.Slug}] = m.Info()
			_ = m.Close(ctx)
		}
	}
	return func(flow, step string) (sandbox.Info, bool) {
		info, ok := infos[[2]string{flow, step}]
		return info, ok
	}, nil
}
