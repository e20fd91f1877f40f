// Package dag lays out a flow's steps as a left-to-right graph for an SVG drawing: a step's
// column is its dependency depth (roots first), rows within a column follow the average
// row of the step's dependencies so edges cross little. No JavaScript graph library: the
// page draws what Layout computes.
package dag

import (
	"cmp"
	"fmt"
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
}

// Box sizes, in SVG user units.
const (
	NodeWidth  = 176
	NodeHeight = 52
	colGap     = 64
	rowGap     = 18
	margin     = 8
)

// Placed is a node with its position.
type Placed struct {
	Node
	X, Y  int
	Title string // the slug, shortened to fit the box
}

// Edge is a dependency arrow, as an SVG path.
type Edge struct {
	From, To string
	Path     string
}

// Graph is a laid-out drawing.
type Graph struct {
	Width, Height int
	Nodes         []Placed
	Edges         []Edge
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
	g := Graph{
		Width:  2*margin + cols*NodeWidth + max(cols-1, 0)*colGap,
		Height: 2*margin + maxRows*NodeHeight + max(maxRows-1, 0)*rowGap,
	}
	pos := make([][2]int, len(nodes))
	for i, n := range nodes {
		// Centre shorter columns vertically.
		offset := (maxRows - rowsPerCol[depth[i]]) * (NodeHeight + rowGap) / 2
		x := margin + depth[i]*(NodeWidth+colGap)
		y := margin + offset + int(row[i])*(NodeHeight+rowGap)
		pos[i] = [2]int{x, y}
		g.Nodes = append(g.Nodes, Placed{Node: n, X: x, Y: y, Title: shorten(n.Slug, 20)})
	}
	for i, n := range nodes {
		for _, d := range n.DependsOn {
			j, ok := index[d]
			if !ok || j >= i {
				continue
			}
			x1, y1 := pos[j][0]+NodeWidth, pos[j][1]+NodeHeight/2
			x2, y2 := pos[i][0], pos[i][1]+NodeHeight/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, Edge{From: d, To: n.Slug,
				Path: fmt.Sprintf("M%d,%d C%d,%d %d,%d %d,%d", x1, y1, mid, y1, mid, y2, x2-6, y2)})
		}
	}
	return g
}

// shorten cuts s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
