package telemetry

import (
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/buildinfo"
)

func TestBuildInfoGauge(t *testing.T) {
	m := NewMetrics(nil, func() int { return 0 })
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	bi := buildinfo.Get()
	for _, f := range families {
		if f.GetName() != "pgflow_wasm_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.Metric[0].Label {
			labels[l.GetName()] = l.GetValue()
		}
		if f.Metric[0].GetGauge().GetValue() != 1 || labels["version"] != bi.Version || labels["engines"] != bi.EngineList() ||
			labels["commit"] != bi.Commit || labels["pgflow_sql"] != bi.PgflowSQL {
			t.Errorf("pgflow_wasm_build_info %v = %v", labels, f.Metric[0].GetGauge().GetValue())
		}
		return
	}
	t.Error("no pgflow_wasm_build_info")
}
