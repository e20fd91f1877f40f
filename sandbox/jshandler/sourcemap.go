package jshandler

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// SourceMap is a decoded source map (version 3): what mapping a stack needs.
type SourceMap struct {
	Sources []string    // relative to the bundle's folder (the entry's)
	lines   [][]mapping // by generated line (0-based), sorted by generated column
}

type mapping struct{ col, src, line, srcCol int } // all 0-based

// ParseSourceMap decodes the "mappings" of a version 3 source map.
func ParseSourceMap(data []byte) (*SourceMap, error) {
	var raw struct {
		Version  int      `json:"version"`
		Sources  []string `json:"sources"`
		Mappings string   `json:"mappings"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	if raw.Version != 3 {
		return nil, fmt.Errorf("source map version %d, want 3", raw.Version)
	}
	sm := &SourceMap{Sources: raw.Sources}
	// Fields are deltas: the column from the previous segment of the same line, the others
	// from the previous segment anywhere.
	var src, line, srcCol int
	for _, text := range strings.Split(raw.Mappings, ";") {
		var segs []mapping
		col := 0
		for _, seg := range strings.Split(text, ",") {
			if seg == "" {
				continue
			}
			v, err := decodeVLQ(seg)
			if err != nil {
				return nil, err
			}
			col += v[0]
			if len(v) < 4 {
				continue // a generated position mapped to nothing
			}
			src, line, srcCol = src+v[1], line+v[2], srcCol+v[3]
			if src < 0 || src >= len(sm.Sources) {
				return nil, fmt.Errorf("source map: source index %d out of range", src)
			}
			segs = append(segs, mapping{col, src, line, srcCol})
		}
		sort.SliceStable(segs, func(i, j int) bool { return segs[i].col < segs[j].col })
		sm.lines = append(sm.lines, segs)
	}
	return sm, nil
}

const base64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// decodeVLQ decodes one segment: base64 digits of 5 bits each, the sixth bit saying more
// follow, the lowest bit of each value its sign.
func decodeVLQ(seg string) ([]int, error) {
	var out []int
	v, shift := 0, 0
	for i := 0; i < len(seg); i++ {
		d := strings.IndexByte(base64Digits, seg[i])
		if d < 0 {
			return nil, fmt.Errorf("source map: %q is not a base64 digit", seg[i])
		}
		v += (d & 31) << shift
		if d&32 != 0 {
			shift += 5
			if shift > 30 {
				return nil, errors.New("source map: a value is too long")
			}
			continue
		}
		n := v >> 1
		if v&1 != 0 {
			n = -n
		}
		out = append(out, n)
		v, shift = 0, 0
	}
	if shift != 0 {
		return nil, errors.New("source map: a segment ends inside a value")
	}
	return out, nil
}

// Lookup maps a 1-based line and column of the bundle to a source file and its 1-based line
// and column: the last mapping at or before the column on that line.
func (sm *SourceMap) Lookup(line, col int) (file string, srcLine, srcCol int, ok bool) {
	if line < 1 || line > len(sm.lines) {
		return "", 0, 0, false
	}
	segs := sm.lines[line-1]
	i := sort.Search(len(segs), func(i int) bool { return segs[i].col > col-1 }) - 1
	if i < 0 {
		if len(segs) == 0 {
			return "", 0, 0, false
		}
		i = 0 // before the first mapping: QuickJS points at the start of an expression
	}
	m := segs[i]
	return sm.Sources[m.src], m.line + 1, m.srcCol + 1, true
}

var bundlePos = regexp.MustCompile(regexp.QuoteMeta(bundleName) + `:(\d+):(\d+)`)

// MapStack rewrites every handler.js:LINE:COL in text to the source file, line and column it
// came from. Stack frames the user did not write are dropped: the prelude's (fetch, the
// handler's caller), the bundle's own wrapper, which maps to no source, and a flow file's
// entry (which calls the step's inline handler).
func (sm *SourceMap) MapStack(text string) string {
	if !strings.Contains(text, bundleName+":") && !strings.Contains(text, "pgflow:prelude") {
		return text
	}
	lines := strings.Split(text, "\n")
	out := lines[:0]
	for _, line := range lines {
		frame := strings.HasPrefix(strings.TrimLeft(line, " "), "at ")
		if frame && strings.Contains(line, "(pgflow:prelude") {
			continue
		}
		unmapped := false
		line = bundlePos.ReplaceAllStringFunc(line, func(m string) string {
			g := bundlePos.FindStringSubmatch(m)
			l, _ := strconv.Atoi(g[1])
			c, _ := strconv.Atoi(g[2])
			if f, sl, sc, ok := sm.Lookup(l, c); ok {
				return fmt.Sprintf("%s:%d:%d", f, sl, sc)
			}
			unmapped = true
			return m
		})
		if frame && (unmapped || strings.Contains(line, flowEntryName+":")) {
			continue
		}
		out = append(out, line)
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}
