// Package dag lays out a flow's steps as a left-to-right graph for an SVG drawing: a step's
// column is its dependency depth (roots first), rows within a column follow the average
// row of the step's dependencies so edges cross little. No JavaScript graph library: the
// page draws what Layout computes.
//
// Every edge is drawn where it can be seen, never behind a box. An edge between neighbouring
// columns crosses only the gap between them. An edge that skips columns leaves its step into
// the gap after it, runs along a lane between the rows of the columns it passes (or above or
// below them all), and comes down to its step in the gap before it; each such edge gets a
// track of its own in each gap and a lane of its own, and the gaps widen with their tracks.
// Edges leave and enter a box at points spread along its side, so a fan-in's arrows stay
// apart.
package dag

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Node is one step to draw.
type Node struct {
	Slug      string
	DependsOn []string
	// Status picks the node's colour (a CSS class); Label is its second line of text.
	Status string
	Label  string
	Href   string // where clicking the node goes, "" for nowhere
	// External marks a step another worker serves (flows.yaml `external: true`).
	External bool
}

// Box sizes, in SVG user units.
const (
	NodeWidth  = 176
	NodeHeight = 52
	minColGap  = 64
	rowGap     = 30 // room for a few lanes between two rows
	margin     = 8

	clearance  = 5  // how far a lane or track stays from a box
	laneStep   = 6  // between two lanes in one gap between rows
	trackStep  = 7  // between two tracks in one gap between columns
	trackLeft  = 12 // a track's room after the column on its left
	trackRight = 18 // and before the column on its right (the arrowhead)
	arrowRoom  = 6  // an edge ends this far before its box: the arrowhead fills it
)

// Placed is a node with its position.
type Placed struct {
	Node
	X, Y  int
	Title string // the slug, shortened to fit the box
}

// Point is a point of the drawing.
type Point struct{ X, Y int }

// Edge is a dependency arrow, as an SVG path.
type Edge struct {
	From, To string
	Path     string
	// Points are the path's corners: start, end, and for a routed edge every bend (a
	// neighbour edge is a curve between its two points, inside the gap between them).
	Points []Point
	Routed bool // it skips columns: Points is a polyline
}

// Graph is a laid-out drawing.
type Graph struct {
	Width, Height int
	Nodes         []Placed
	Edges         []Edge
}

// edge is a dependency while it is laid out.
type edge struct {
	from, to   int // node indices
	outY, inY  int // where it leaves from and enters its boxes
	outX, inX  int // the tracks of a routed edge in the gaps after from and before to
	lane       int // a routed edge's lane
	routed     bool
	fromCol    int
	toCol      int
	fromCentre int
	toCentre   int
}

// Layout places nodes (given in the flow's step order, which is topological). Dependencies
// on slugs that are not nodes are ignored.
func Layout(nodes []Node) Graph {
	index := map[string]int{}
	for i, n := range nodes {
		index[n.Slug] = i
	}
	depth := make([]int, len(nodes))
	for i, n := range nodes {
		for _, d := range n.DependsOn {
			if j, ok := index[d]; ok && j < i {
				depth[i] = max(depth[i], depth[j]+1)
			}
		}
	}
	cols := 0
	for _, d := range depth {
		cols = max(cols, d+1)
	}
	// Rows: each column ordered by the mean row of the node's dependencies (barycentre),
	// ties by step order.
	row := make([]float64, len(nodes))
	rowsPerCol := make([]int, cols)
	for c := 0; c < cols; c++ {
		var members []int
		for i := range nodes {
			if depth[i] == c {
				members = append(members, i)
			}
		}
		key := map[int]float64{}
		for _, i := range members {
			sum, n := 0.0, 0
			for _, d := range nodes[i].DependsOn {
				if j, ok := index[d]; ok && j < i {
					sum += row[j]
					n++
				}
			}
			key[i] = float64(i) / 1e6 // roots keep step order
			if n > 0 {
				key[i] = sum/float64(n) + key[i]
			}
		}
		slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(key[a], key[b]) })
		for r, i := range members {
			row[i] = float64(r)
		}
		rowsPerCol[c] = len(members)
	}
	maxRows := 0
	for _, n := range rowsPerCol {
		maxRows = max(maxRows, n)
	}
	ys := make([]int, len(nodes)) // y before the lanes above the rows are known
	for i := range nodes {
		// Centre shorter columns vertically.
		offset := (maxRows - rowsPerCol[depth[i]]) * (NodeHeight + rowGap) / 2
		ys[i] = offset + int(row[i])*(NodeHeight+rowGap)
	}

	// The edges, with the points where they leave and enter their boxes.
	var edges []*edge
	for i, n := range nodes {
		for _, d := range n.DependsOn {
			j, ok := index[d]
			if !ok || j >= i {
				continue
			}
			edges = append(edges, &edge{from: j, to: i, fromCol: depth[j], toCol: depth[i], routed: depth[i] > depth[j]+1,
				fromCentre: ys[j] + NodeHeight/2, toCentre: ys[i] + NodeHeight/2})
		}
	}
	spreadPorts(edges, len(nodes), ys)

	// Lanes for the edges that skip columns, nearest the straight line between their ends.
	var blockedAll [][2]int // every box, for lanes above or below all rows
	for i := range nodes {
		blockedAll = append(blockedAll, [2]int{ys[i], ys[i] + NodeHeight})
	}
	var used []usedLane
	for _, e := range edges {
		if !e.routed {
			continue
		}
		var blocked [][2]int
		for i := range nodes {
			if depth[i] > e.fromCol && depth[i] < e.toCol {
				blocked = append(blocked, [2]int{ys[i], ys[i] + NodeHeight})
			}
		}
		e.lane = pickLane(blocked, (e.outY+e.inY)/2, e.fromCol, e.toCol, used)
		used = append(used, usedLane{e.lane, e.fromCol, e.toCol})
	}

	// Tracks: each gap between columns widens with the routed edges that bend in it.
	tracks := make([][]*edge, max(cols-1, 0)) // gap g is between columns g and g+1
	for _, e := range edges {
		if e.routed {
			tracks[e.fromCol] = append(tracks[e.fromCol], e)
			tracks[e.toCol-1] = append(tracks[e.toCol-1], e)
		}
	}
	colX := make([]int, cols)
	x := margin
	for c := 0; c < cols; c++ {
		colX[c] = x
		x += NodeWidth
		if c < cols-1 {
			x += max(minColGap, trackLeft+trackRight+len(tracks[c])*trackStep)
		}
	}
	for g, list := range tracks {
		// Tracks in the order of their bends' heights: fewer crossings between them.
		slices.SortStableFunc(list, func(a, b *edge) int {
			return cmp.Compare(bendY(a, g), bendY(b, g))
		})
		left := colX[g] + NodeWidth + trackLeft
		right := colX[g+1] - trackRight
		step := trackStep
		if n := len(list); n > 1 {
			step = min(trackStep, (right-left)/(n-1))
		}
		start := (left + right - step*(len(list)-1)) / 2
		for k, e := range list {
			tx := start + k*step
			if e.fromCol == g { // a routed edge skips a column: its two gaps differ
				e.outX = tx
			} else {
				e.inX = tx
			}
		}
	}

	// Shift everything down so lanes above the rows stay inside the drawing.
	top, bottom := 0, 0
	for i := range nodes {
		bottom = max(bottom, ys[i]+NodeHeight)
	}
	for _, e := range edges {
		if e.routed {
			top, bottom = min(top, e.lane-clearance), max(bottom, e.lane+clearance)
		}
	}
	dy := margin - top
	width := margin
	if cols > 0 {
		width = colX[cols-1] + NodeWidth + margin
	} else {
		width = 2 * margin
	}
	g := Graph{Width: width, Height: bottom + dy + margin}
	pos := make([]Point, len(nodes))
	for i, n := range nodes {
		pos[i] = Point{colX[depth[i]], ys[i] + dy}
		title := shorten(n.Slug, 20)
		if n.External {
			title = shorten(n.Slug, 13) // the box's top right corner says "external"
		}
		g.Nodes = append(g.Nodes, Placed{Node: n, X: pos[i].X, Y: pos[i].Y, Title: title})
	}
	for _, e := range edges {
		x1, y1 := pos[e.from].X+NodeWidth, e.outY+dy
		x2, y2 := pos[e.to].X-arrowRoom, e.inY+dy
		out := Edge{From: nodes[e.from].Slug, To: nodes[e.to].Slug, Routed: e.routed}
		if !e.routed {
			mid := (x1 + x2) / 2
			out.Points = []Point{{x1, y1}, {x2, y2}}
			out.Path = fmt.Sprintf("M%d,%d C%d,%d %d,%d %d,%d", x1, y1, mid, y1, mid, y2, x2, y2)
		} else {
			lane := e.lane + dy
			out.Points = []Point{{x1, y1}, {e.outX, y1}, {e.outX, lane}, {e.inX, lane}, {e.inX, y2}, {x2, y2}}
			out.Path = polyline(out.Points)
		}
		g.Edges = append(g.Edges, out)
	}
	return g
}

// spreadPorts spreads the edges leaving (entering) each box along its right (left) side, in
// the order of the boxes at their other ends, so that no two share a point.
func spreadPorts(edges []*edge, n int, ys []int) {
	outs := make([][]*edge, n)
	ins := make([][]*edge, n)
	for _, e := range edges {
		outs[e.from] = append(outs[e.from], e)
		ins[e.to] = append(ins[e.to], e)
	}
	place := func(list []*edge, y int, other func(*edge) int, set func(*edge, int)) {
		slices.SortStableFunc(list, func(a, b *edge) int { return cmp.Compare(other(a), other(b)) })
		for k, e := range list {
			// Between 10 units from the top and from the bottom of the box.
			span := NodeHeight - 20
			p := y + NodeHeight/2
			if len(list) > 1 {
				p = y + 10 + k*span/(len(list)-1)
			}
			set(e, p)
		}
	}
	for i := 0; i < n; i++ {
		place(outs[i], ys[i], func(e *edge) int { return e.toCentre*1000 + e.toCol }, func(e *edge, p int) { e.outY = p })
		place(ins[i], ys[i], func(e *edge) int { return e.fromCentre*1000 + e.fromCol }, func(e *edge, p int) { e.inY = p })
	}
}

// bendY is where a routed edge's vertical run in gap g is, for ordering the tracks.
func bendY(e *edge, g int) int {
	if e.fromCol == g {
		return (e.outY + e.lane) / 2
	}
	return (e.lane + e.inY) / 2
}

// usedLane is a lane an edge runs along, over columns from..to.
type usedLane struct{ y, from, to int }

// pickLane finds the y of a horizontal run that keeps clear of the blocked intervals (the
// boxes of the columns it passes) and of lanes already taken over overlapping columns,
// nearest to want.
func pickLane(blocked [][2]int, want, from, to int, used []usedLane) int {
	slices.SortFunc(blocked, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	free := func(y int) bool {
		for _, b := range blocked {
			if y > b[0]-clearance && y < b[1]+clearance {
				return false
			}
		}
		for _, u := range used {
			if u.from < to && from < u.to && abs(u.y-y) < laneStep {
				return false
			}
		}
		return true
	}
	// Candidates: every lane slot of every gap between two boxes, then slots above the
	// topmost box and below the lowest.
	var cands []int
	lo, hi := math.MaxInt, math.MinInt
	for _, b := range blocked {
		lo, hi = min(lo, b[0]), max(hi, b[1])
	}
	for i := 0; i+1 < len(blocked); i++ {
		a, b := blocked[i][1]+clearance, blocked[i+1][0]-clearance
		for y := (a + b) / 2; y >= a; y -= laneStep {
			cands = append(cands, y)
		}
		for y := (a+b)/2 + laneStep; y <= b; y += laneStep {
			cands = append(cands, y)
		}
	}
	for k := 0; k < 1000; k++ {
		cands = append(cands, lo-clearance-k*laneStep, hi+clearance+k*laneStep)
	}
	best, bestCost := 0, math.MaxInt
	for _, y := range cands {
		if !free(y) {
			continue
		}
		if c := abs(y - want); c < bestCost {
			best, bestCost = y, c
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// polyline is an SVG path through points with its corners rounded a little (the rounding
// stays inside the corner, clear of the boxes).
func polyline(ps []Point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M%d,%d", ps[0].X, ps[0].Y)
	const r = 4
	for i := 1; i < len(ps); i++ {
		p := ps[i]
		if i == len(ps)-1 {
			fmt.Fprintf(&b, " L%d,%d", p.X, p.Y)
			break
		}
		prev, next := ps[i-1], ps[i+1]
		in := min(r, dist(prev, p)/2)
		out := min(r, dist(p, next)/2)
		a := toward(p, prev, in)
		c := toward(p, next, out)
		fmt.Fprintf(&b, " L%d,%d Q%d,%d %d,%d", a.X, a.Y, p.X, p.Y, c.X, c.Y)
	}
	return b.String()
}

func dist(a, b Point) int { return abs(a.X-b.X) + abs(a.Y-b.Y) }

// toward is the point d units from p toward q (along an axis-parallel segment).
func toward(p, q Point, d int) Point {
	switch {
	case q.X > p.X:
		return Point{p.X + d, p.Y}
	case q.X < p.X:
		return Point{p.X - d, p.Y}
	case q.Y > p.Y:
		return Point{p.X, p.Y + d}
	case q.Y < p.Y:
		return Point{p.X, p.Y - d}
	}
	return p
}

// shorten cuts s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
