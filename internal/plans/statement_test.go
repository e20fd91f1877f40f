package plans

import (
	"strings"
	"testing"
)

// A body is one statement when its only top-level semicolon ends it; semicolons in comments,
// strings, quoted names and dollar quotes do not count.
func TestOneStatementFindsTheTopLevelSemicolons(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body, want, err string
	}{
		{"select 1", "select 1", ""},
		{"select 1;", "select 1", ""},
		{"select 1; -- done\n  /* and /* nested */ done */\n", "select 1", ""},
		{"select 1 -- a ; in a comment\n", "select 1 -- a ; in a comment\n", ""},
		{"select ';', e'\\';', \"a;b\", $$;$$, $x$ $$; $x$", "select ';', e'\\';', \"a;b\", $$;$$, $x$ $$; $x$", ""},
		{"select 'it''s;'", "select 'it''s;'", ""},
		{"select $1; ", "select $1", ""},
		{"select 1; select 2", "", "more than one statement"},
		{"select 1; ';'", "", "more than one statement"},
		{"update t set a = 1; select 1;", "", "more than one statement"},
		{"select 'open", "", "unterminated string"},
		{"select /* open", "", "unterminated comment"},
		{"select $q$ open", "", "unterminated dollar quote"},
		{" ; ", "", "empty"},
	} {
		got, err := oneStatement(c.body)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("oneStatement(%q) = %q, %v; want an error saying %q", c.body, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("oneStatement(%q) = %q, %v; want %q", c.body, got, err, c.want)
		}
	}
}
