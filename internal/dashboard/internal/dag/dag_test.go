package dag_test

import (
	"strings"
	"testing"

	"github.com/pgflow-wasm/pgflow-wasm/internal/dashboard/internal/dag"
)

// word_totals: count -> (total_rust, total_c) -> both_totals.
func TestLayoutPlacesStepsByDependencyDepth(t *testing.T) {
	g := dag.Layout([]dag.Node{
		{Slug: "count"},
		{Slug: "total_rust", DependsOn: []string{"count"}},
		{Slug: "total_c", DependsOn: []string{"count"}},
		{Slug: "both_totals", DependsOn: []string{"total_rust", "total_c"}},
		{Slug: "a_very_long_step_slug_that_does_not_fit", DependsOn: []string{"missing"}},
	})
	at := map[string]dag.Placed{}
	for _, n := range g.Nodes {
		at[n.Slug] = n
	}
	if !(at["count"].X < at["total_rust"].X && at["total_rust"].X == at["total_c"].X && at["total_c"].X < at["both_totals"].X) {
		t.Errorf("columns are not by depth: %+v", g.Nodes)
	}
	if at["a_very_long_step_slug_that_does_not_fit"].X != at["count"].X {
		t.Error("a step whose only dependency is unknown is a root")
	}
	if title := at["a_very_long_step_slug_that_does_not_fit"].Title; len([]rune(title)) > 20 || !strings.HasSuffix(title, "…") {
		t.Errorf("long slug shown as %q", title)
	}
	// No two boxes overlap, and every box is inside the drawing.
	for i, a := range g.Nodes {
		if a.X < 0 || a.Y < 0 || a.X+dag.NodeWidth > g.Width || a.Y+dag.NodeHeight > g.Height {
			t.Errorf("%s at (%d,%d) is outside %dx%d", a.Slug, a.X, a.Y, g.Width, g.Height)
		}
		for _, b := range g.Nodes[i+1:] {
			if a.X < b.X+dag.NodeWidth && b.X < a.X+dag.NodeWidth && a.Y < b.Y+dag.NodeHeight && b.Y < a.Y+dag.NodeHeight {
				t.Errorf("%s and %s overlap", a.Slug, b.Slug)
			}
		}
	}
	if len(g.Edges) != 4 {
		t.Errorf("%d edges, want 4 (the unknown dependency draws none)", len(g.Edges))
	}
	if empty := dag.Layout(nil); len(empty.Nodes) != 0 || empty.Width <= 0 {
		t.Errorf("empty graph: %+v", empty)
	}
}
