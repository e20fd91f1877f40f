package poller

import "testing"

func TestWithRunPutsTheFlowInputBackIntoASingleStepsInput(t *testing.T) {
	for _, c := range []struct{ input, run, want string }{
		{`{}`, `{"hello": "world"}`, `{"run": {"hello": "world"}}`},
		{`{"a": [1, 2]}`, `[1, 2]`, `{"run": [1, 2], "a": [1, 2]}`},
		{` { "b": {"go": false}, "c": 1 } `, `7`, `{"run": 7, "b": {"go": false}, "c": 1 }`},
		{`{}`, ``, `{"run": null}`},
		{`[1]`, `1`, `[1]`}, // not an object: left alone
	} {
		var run []byte
		if c.run != "" {
			run = []byte(c.run)
		}
		if got := string(withRun([]byte(c.input), run)); got != c.want {
			t.Errorf("withRun(%s, %s) = %s, want %s", c.input, c.run, got, c.want)
		}
	}
}
