package pgflowwasm

import (
	"reflect"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/worker"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// The client's defaults are the worker's: a zero Config serves exactly as a zero worker
// config does, so the two cannot drift apart.
func TestAZeroConfigServesWithTheWorkersDefaults(t *testing.T) {
	t.Parallel()
	c := &Client{cfg: DefaultConfig()}
	got := c.workerConfig().WithDefaults()
	want := worker.Config{}.WithDefaults()
	got.Log, got.Health, want.Log, want.Health = nil, nil, nil, nil
	got.Hooks, want.Hooks = pgflowtype.Hooks{}, pgflowtype.Hooks{}
	got.Process = want.Process // a fresh id each time
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig's worker config differs from the worker's own defaults:\n got %+v\nwant %+v", got, want)
	}
}

// A negative duration keeps its documented meaning through both layers: no attempt
// history, foreign workers never recovered, pgflow looked at only when errors say so.
func TestNegativeDurationsKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	cfg := Config{AttemptHistory: -1, ForeignStaleAfter: -1, PgflowCheckInterval: -1, WatchInterval: -1, FetchLeases: -1}.WithDefaults()
	c := &Client{cfg: cfg}
	w := c.workerConfig().WithDefaults()
	for name, d := range map[string]time.Duration{
		"AttemptHistory": w.AttemptHistory, "ForeignStaleAfter": w.ForeignStaleAfter,
		"PgflowCheckInterval": w.PgflowCheckInterval, "WatchInterval": cfg.WatchInterval,
	} {
		if d >= 0 {
			t.Errorf("%s: a negative value became %v", name, d)
		}
	}
	if w.FetchLeases >= 0 {
		t.Errorf("FetchLeases: a negative value became %d", w.FetchLeases)
	}
	if w.DrainTimeout != DrainTimeoutDefault || cfg.Concurrency != ConcurrencyDefault {
		t.Errorf("unset fields did not take their defaults: %+v", cfg)
	}
}
