//go:build !wasip1

package pgflow

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func register(t *testing.T, h Handler) {
	t.Helper()
	Handle(h)
	t.Cleanup(func() { Handle(nil) })
}

func TestCallRecordsOutputAndLogs(t *testing.T) {
	register(t, func(input, context []byte) ([]byte, error) {
		Log(Info, "got "+string(input))
		if !strings.Contains(string(context), `"step_slug":"s"`) {
			return nil, errors.New("context lacks the step")
		}
		return []byte(`{"ok":true}`), nil
	})
	got := Call([]byte(`{"run":1}`), TestContext("f", "s"))
	if got.Status != statusOK || string(got.Output) != `{"ok":true}` || got.Error != "" ||
		len(got.Logs) != 1 || got.Logs[0] != (LogLine{Info, `got {"run":1}`}) {
		t.Fatalf("%+v", got)
	}
}

func TestCallRecordsErrors(t *testing.T) {
	register(t, func(input, context []byte) ([]byte, error) { return nil, errors.New("no name") })
	got := Call(nil, nil)
	if got.Status != statusHandlerError || got.Error != "no name" || got.Output != nil {
		t.Fatalf("%+v", got)
	}
}

func TestCallGrantsOnlyWhatTheHostHolds(t *testing.T) {
	var seen Request
	h := TestHost{
		Config: map[string]string{"TOKEN": "t0k"},
		HTTP: func(req Request) (*Response, error) {
			seen = req
			if strings.Contains(req.URL, "refused") {
				return nil, &CapError{Code: ErrHostNotAllowed, Message: "not in http.allow"}
			}
			return &Response{Status: 201, Header: []Header{{"Content-Type", "application/json"}}, Body: []byte(`{"id":7}`)}, nil
		},
	}
	register(t, func(input, context []byte) ([]byte, error) {
		token, err := Config("TOKEN")
		if err != nil {
			return nil, err
		}
		if _, err := Config("OTHER"); err == nil || err.(*CapError).Code != ErrDenied {
			return nil, errors.New("OTHER was not denied")
		}
		resp, err := HTTP("POST", "https://api.example/x", []Header{{"Authorization", "Bearer " + token}}, []byte("body"))
		if err != nil {
			return nil, err
		}
		if _, err := Get("https://refused.example/"); err == nil || err.Error() != "not in http.allow" {
			return nil, errors.New("the refusal did not come back")
		}
		return []byte(`{"status":` + strconv.Itoa(resp.Status) + `,"type":"` + resp.Get("content-type") + `","body":` + string(resp.Body) + `}`), nil
	})
	got := h.Call([]byte(`{}`), TestContext("f", "s"))
	if got.Status != statusOK || string(got.Output) != `{"status":201,"type":"application/json","body":{"id":7}}` {
		t.Fatalf("%+v", got)
	}
	if seen.Method != "GET" || seen.URL != "https://refused.example/" {
		t.Fatalf("last request %+v", seen)
	}
}

func TestZeroHostDeniesCapabilities(t *testing.T) {
	register(t, func(input, context []byte) ([]byte, error) {
		_, err := Get("http://example.com/")
		return nil, err
	})
	got := Call(nil, nil)
	if got.Status != statusHandlerError || !strings.Contains(got.Error, "HTTP is denied") {
		t.Fatalf("%+v", got)
	}
}
