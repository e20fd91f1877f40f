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

func TestSQLThroughTheTestHost(t *testing.T) {
	var seen []string
	h := TestHost{SQL: func(request string) ([]byte, error) {
		seen = append(seen, request)
		if strings.Contains(request, "set role") {
			return nil, &CapError{Code: ErrSQLRefused, Message: "sql: SET statements are not allowed"}
		}
		return []byte(`{"columns":["n"],"rows":[[7]],"row_count":1,"command":"SELECT 1"}`), nil
	}}
	register(t, func(input, context []byte) ([]byte, error) {
		res, err := SQL("select $1::int as n, $2, $3, $4, $5, $6", 7, "it's \"q\"\n", nil, true, 0.5, JSON(`{"a":1}`))
		if err != nil {
			return nil, err
		}
		_, err = SQL("set role postgres")
		if ce, ok := err.(*CapError); !ok || ce.Code != ErrSQLRefused || ce.Message != "sql: SET statements are not allowed" {
			return nil, errors.New("the refusal did not come back")
		}
		if _, err := SQL("select $1", struct{}{}); err == nil || err.(*CapError).Code != ErrBadRequest {
			return nil, errors.New("an unsupported parameter was sent")
		}
		return res, nil
	})
	got := h.Call([]byte(`{}`), TestContext("f", "s"))
	if got.Status != statusOK || string(got.Output) != `{"columns":["n"],"rows":[[7]],"row_count":1,"command":"SELECT 1"}` {
		t.Fatalf("%+v", got)
	}
	want := `{"sql":"select $1::int as n, $2, $3, $4, $5, $6","params":[7,"it's \"q\"\n",null,true,0.5,{"a":1}]}`
	if len(seen) != 2 || seen[0] != want || seen[1] != `{"sql":"set role postgres","params":[]}` {
		t.Fatalf("requests %q", seen)
	}
	if _, err := SQL("select 1"); err == nil || err.(*CapError).Code != ErrDenied {
		t.Fatalf("outside a call: %v", err)
	}
}
