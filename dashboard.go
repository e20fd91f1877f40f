package pgflowwasm

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard"
)

// DashboardOptions configure the web dashboard of DashboardHandler.
type DashboardOptions struct {
	// BasePath is the path the handler is mounted on, such as "/ops" for
	// mux.Handle("/ops/", h): every link, form, asset and event stream of its pages starts
	// with it. "" mounts it at the root.
	BasePath string
	// Token, when set, must come with every request: once as ?token= (the browser then keeps
	// a session cookie), or as an Authorization: Bearer header. At least 16 characters.
	// Without one the dashboard answers only requests whose Host header names a loopback
	// address (localhost, 127.0.0.1, [::1]), so a page elsewhere cannot read it: set one
	// wherever the server is reached from another machine.
	Token string
	// Actions lets the dashboard start, cancel and rerun runs, drain and undrain worker
	// processes and deprecate workers (each is logged, and recorded as the CLI records it); it is
	// read-only without.
	Actions bool
	// Logger receives the dashboard's log; nil: the client's Config.Logger.
	Logger *slog.Logger
	// TraceURL links each run page to the run's trace (Tracing): {trace_id} is replaced by
	// the run's trace id, {run_id} by its id, e.g. "https://tempo.example/trace/{trace_id}".
	TraceURL string
}

// dashboardOpenTimeout bounds what DashboardHandler asks the database before it returns.
const dashboardOpenTimeout = 30 * time.Second

// DashboardHandler returns the web dashboard over the client's database (runs, a run's
// steps and tasks, flows with the modules this client serves, workers), live in the
// browser, to mount inside your own http.Server. It follows the client's flows as they
// reload, as `pgflow-wasm serve --ui-addr` does; its pages read through the client's pool.
// Stop closes it (its open event streams end, and it answers 503).
func (c *Client) DashboardHandler(opts DashboardOptions) (http.Handler, error) {
	log := opts.Logger
	if log == nil {
		log = c.log
	}
	ctx, cancel := context.WithTimeout(context.Background(), dashboardOpenTimeout)
	defer cancel()
	d, err := dashboard.New(ctx, dashboard.Config{
		Pool: c.pool, Log: log, Token: opts.Token, Actions: opts.Actions, BasePath: opts.BasePath, TraceURL: opts.TraceURL,
		Flows: c.Flows, Modules: c.ModuleInfo, WorkerStaleAfter: c.cfg.WorkerStaleAfter,
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		d.Close()
		return nil, errors.New("pgflowwasm: DashboardHandler after Stop")
	}
	c.dashboards = append(c.dashboards, d)
	return d.Handler(), nil
}
