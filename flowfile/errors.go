package flowfile

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a flows file, at a line (0 when the whole file is concerned).
type Error struct {
	File string
	Line int
	Msg  string
}

func (e Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Errors is every problem found in one file, in file order.
type Errors []Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a yaml.v3 syntax error in data into file:line form. yaml.v3's line is
// often not the culprit's (for an unclosed { or [, or a line indented wrong, it names the
// line the enclosing block began on, or the one before), so the line reported is the first
// one at which a prefix of the file fails the same way.
func yamlError(file string, data []byte, err error) Error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	if l := firstFailingLine(data, m[2]); l > 0 {
		line = l
	}
	return Error{File: file, Line: line, Msg: "invalid YAML: " + m[2] + yamlHint(m[2])}
}

// firstFailingLine is the first line n such that lines 1..n alone fail to parse with the
// message problem, or 0. Only called on a broken file, so its quadratic cost is no matter.
func firstFailingLine(data []byte, problem string) int {
	lines := strings.SplitAfter(string(data), "\n")
	var prefix strings.Builder
	for n, l := range lines {
		prefix.WriteString(l)
		var doc yaml.Node
		err := yaml.Unmarshal([]byte(prefix.String()), &doc)
		if err == nil {
			continue
		}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil && m[2] == problem {
			return n + 1
		}
	}
	return 0
}

// yamlHint says what yaml.v3's commonest messages mean for a hand-written file.
func yamlHint(problem string) string {
	switch {
	case strings.Contains(problem, "did not find expected ',' or '}'"):
		return " (a { ... } that starts here is not closed, or its items lack a comma)"
	case strings.Contains(problem, "did not find expected ',' or ']'"):
		return " (a [ ... ] that starts here is not closed, or its items lack a comma)"
	case strings.Contains(problem, "did not find expected key"):
		return " (this line is indented differently from the lines of its block)"
	case strings.Contains(problem, "tab character"):
		return " (indent with spaces: YAML does not allow tabs there)"
	case strings.Contains(problem, "found unexpected end of stream"):
		return " (something that starts here, a quoted value perhaps, is not closed)"
	}
	return ""
}

// suggest returns ` (did you mean "x"?)` for the closest candidate within two edits.
func suggest(got string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(got, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
