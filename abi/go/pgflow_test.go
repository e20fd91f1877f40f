package pgflow

import (
	"errors"
	"testing"
)

// recorder collects what run hands to the host.
type recorder struct {
	output []byte
	err    string
}

func (r *recorder) run(t *testing.T, h Handler) int32 {
	t.Helper()
	handler = h
	t.Cleanup(func() { handler = nil })
	return run([]byte(`{"run":1}`), []byte(`{"attempt":1}`), func(b []byte) { r.output = b }, func(s string) { r.err = s })
}

func TestRunPassesOutputAndStatus(t *testing.T) {
	var r recorder
	status := r.run(t, func(input, context []byte) ([]byte, error) {
		return append(append([]byte(nil), input...), context...), nil
	})
	if status != statusOK || string(r.output) != `{"run":1}{"attempt":1}` || r.err != "" {
		t.Fatalf("status %d output %q error %q", status, r.output, r.err)
	}
}

func TestRunReportsHandlerErrors(t *testing.T) {
	var r recorder
	status := r.run(t, func(input, context []byte) ([]byte, error) { return nil, errors.New("no name") })
	if status != statusHandlerError || r.err != "no name" || r.output != nil {
		t.Fatalf("status %d output %q error %q", status, r.output, r.err)
	}
}

func TestRunWithoutHandlerFails(t *testing.T) {
	var r recorder
	if status := r.run(t, nil); status != statusHandlerError || r.err == "" {
		t.Fatalf("status %d error %q", status, r.err)
	}
}

func TestPanicWritesMessageThenPanics(t *testing.T) {
	var r recorder
	defer func() {
		if recover() == nil {
			t.Fatal("run swallowed the panic")
		}
		if r.err != "panic: boom" {
			t.Fatalf("error %q, want %q", r.err, "panic: boom")
		}
	}()
	r.run(t, func(input, context []byte) ([]byte, error) { panic("boom") })
}
