package sandbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

func TestTmpHog(t *testing.T) {
	e := newEngine(t, "wazero", sandbox.Config{})
	m := load(t, e, testModule(t, "tmp_memfill"), sandbox.ModuleConfig{})
	for _, n := range []int{1, 4, 16} {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := time.Now()
				res, err := m.Run(context.Background(), task(`{}`, 10*time.Second))
				t.Logf("n=%d %s fuel %d %v", n, time.Since(s), res.FuelUsed, err)
			}()
		}
		wg.Wait()
	}
}
