package dag_test

import (
	"fmt"
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

// Shapes whose edges used to lie behind boxes, or that are large: a fan-in, an edge that
// skips a column, a map between singles, and a 30-step flow with edges skipping up to
// five columns.
func testShapes() map[string][]dag.Node {
	thirty := []dag.Node{}
	for i := 0; i < 30; i++ {
		n := dag.Node{Slug: fmt.Sprintf("s%02d", i)}
		switch {
		case i == 0:
		case i%5 == 0: // a fan-in of the previous five, one of them five columns back
			for j := i - 5; j < i; j++ {
				n.DependsOn = append(n.DependsOn, fmt.Sprintf("s%02d", j))
			}
		default:
			n.DependsOn = []string{fmt.Sprintf("s%02d", i-1)}
			if i >= 3 {
				n.DependsOn = append(n.DependsOn, fmt.Sprintf("s%02d", i-3))
			}
		}
		thirty = append(thirty, n)
	}
	return map[string][]dag.Node{
		"fan-in": {
			{Slug: "count"},
			{Slug: "total_rust", DependsOn: []string{"count"}},
			{Slug: "total_c", DependsOn: []string{"count"}},
			{Slug: "both_totals", DependsOn: []string{"total_rust", "total_c", "count"}},
		},
		"skip a column": {
			{Slug: "a"}, {Slug: "b", DependsOn: []string{"a"}}, {Slug: "c", DependsOn: []string{"b"}},
			{Slug: "d", DependsOn: []string{"a", "c"}}, {Slug: "e", DependsOn: []string{"a", "b", "d"}},
		},
		"map": {
			{Slug: "fetch"}, {Slug: "each", DependsOn: []string{"fetch"}}, {Slug: "sum", DependsOn: []string{"each", "fetch"}},
		},
		"30 steps": thirty,
	}
}

// sample is points along an edge every unit or so: its curve or its polyline.
func sample(e dag.Edge) []point {
	var out []point
	ps := e.Points
	if !e.Routed {
		a, b := ps[0], ps[1]
		mid := float64(a.X+b.X) / 2
		for i := 0; i <= 400; i++ {
			t := float64(i) / 400
			u := 1 - t
			x := u*u*u*float64(a.X) + 3*u*u*t*mid + 3*u*t*t*mid + t*t*t*float64(b.X)
			y := u*u*u*float64(a.Y) + 3*u*u*t*float64(a.Y) + 3*u*t*t*float64(b.Y) + t*t*t*float64(b.Y)
			out = append(out, point{x, y})
		}
		return out
	}
	for i := 0; i+1 < len(ps); i++ {
		a, b := ps[i], ps[i+1]
		n := max(abs(b.X-a.X), abs(b.Y-a.Y), 1)
		for k := 0; k <= n; k++ {
			t := float64(k) / float64(n)
			out = append(out, point{float64(a.X) + t*float64(b.X-a.X), float64(a.Y) + t*float64(b.Y-a.Y)})
		}
	}
	return out
}

type point struct{ x, y float64 }

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Every edge is visible: no point of it lies inside a box it neither starts nor ends at (nor
// inside its own boxes but at their sides), it starts at its step's right side and ends
// just before its dependent's left side, and no two edges share an end point.
func TestNoEdgeCrossesABox(t *testing.T) {
	for name, nodes := range testShapes() {
		t.Run(name, func(t *testing.T) {
			g := dag.Layout(nodes)
			at := map[string]dag.Placed{}
			for _, n := range g.Nodes {
				at[n.Slug] = n
			}
			want := 0
			for _, n := range nodes {
				want += len(n.DependsOn)
			}
			if len(g.Edges) != want {
				t.Fatalf("%d edges, want %d", len(g.Edges), want)
			}
			ends := map[dag.Point]string{}
			for _, e := range g.Edges {
				from, to := at[e.From], at[e.To]
				first, last := e.Points[0], e.Points[len(e.Points)-1]
				if first.X != from.X+dag.NodeWidth || first.Y <= from.Y || first.Y >= from.Y+dag.NodeHeight {
					t.Errorf("%s → %s starts at %v, not on %s's right side", e.From, e.To, first, e.From)
				}
				if last.X >= to.X || last.X < to.X-8 || last.Y <= to.Y || last.Y >= to.Y+dag.NodeHeight {
					t.Errorf("%s → %s ends at %v, not just before %s's left side", e.From, e.To, last, e.To)
				}
				for _, p := range []dag.Point{first, last} {
					if other, ok := ends[p]; ok {
						t.Errorf("%s → %s and %s share the point %v", e.From, e.To, other, p)
					}
					ends[p] = e.From + " → " + e.To
				}
				for _, p := range sample(e) {
					for _, n := range g.Nodes {
						inside := p.x > float64(n.X)+0.5 && p.x < float64(n.X+dag.NodeWidth)-0.5 &&
							p.y > float64(n.Y)+0.5 && p.y < float64(n.Y+dag.NodeHeight)-0.5
						if inside {
							t.Fatalf("%s → %s passes through %s's box at (%.1f, %.1f): %s", e.From, e.To, n.Slug, p.x, p.y, e.Path)
						}
					}
					if p.x < 0 || p.y < 0 || p.x > float64(g.Width) || p.y > float64(g.Height) {
						t.Fatalf("%s → %s leaves the %dx%d drawing at (%.1f, %.1f)", e.From, e.To, g.Width, g.Height, p.x, p.y)
					}
				}
			}
			for i, a := range g.Nodes {
				for _, b := range g.Nodes[i+1:] {
					if a.X < b.X+dag.NodeWidth && b.X < a.X+dag.NodeWidth && a.Y < b.Y+dag.NodeHeight && b.Y < a.Y+dag.NodeHeight {
						t.Errorf("%s and %s overlap", a.Slug, b.Slug)
					}
				}
			}
		})
	}
}
