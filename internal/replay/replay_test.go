package replay

import (
	"errors"
	"testing"
)

// A failure reproduces when its first line is the task's, whatever folders its paths name.
func TestReproducedComparesFirstLinesWithoutFolders(t *testing.T) {
	t.Parallel()
	recorded := "handler_error: http: host example.com:443 is not allowed (flows.yaml:49): [127.0.0.1:18480]\n    at f (fetch.ts:3:1)"
	for _, c := range []struct {
		now  string
		want bool
	}{
		{"handler_error: http: host example.com:443 is not allowed (/srv/app/flows.yaml:49): [127.0.0.1:18480]\n    at f (/tmp/fetch.ts:9:9)", true},
		{"handler_error: http: host example.com:443 is not allowed (flows.yaml:49): [127.0.0.1:18480]", true},
		{"handler_error: http: step may not make HTTP requests (flows.yaml:49)", false},
	} {
		r := Result{Err: errors.New(c.now)}
		r.Task.Error = recorded
		if got := r.Reproduced(); got != c.want {
			t.Errorf("Reproduced(%q) = %v, want %v", c.now, got, c.want)
		}
	}
	if (&Result{Err: errors.New("x")}).Reproduced() {
		t.Error("a task that never failed cannot reproduce a failure")
	}
}
