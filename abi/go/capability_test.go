package pgflow

import (
	"errors"
	"reflect"
	"testing"
)

func TestHeadersRoundTrip(t *testing.T) {
	hs := []Header{{"Authorization", "Bearer x"}, {"X-Empty", ""}, {"X-Multi", "a"}, {"X-Multi", "b"}}
	text := headerText(hs)
	if text != "Authorization: Bearer x\nX-Empty: \nX-Multi: a\nX-Multi: b\n" {
		t.Fatalf("headerText = %q", text)
	}
	if got := parseHeader(text); !reflect.DeepEqual(got, hs) {
		t.Fatalf("parseHeader = %v", got)
	}
	r := &Response{Header: hs}
	if r.Get("x-multi") != "a" || r.Get("missing") != "" {
		t.Fatalf("Get: %q %q", r.Get("x-multi"), r.Get("missing"))
	}
}

func TestCapabilitiesOffWasmAreDenied(t *testing.T) {
	_, err := Get("http://example.com/")
	var ce *CapError
	if !errors.As(err, &ce) || ce.Code != ErrDenied || ce.Message != notHosted {
		t.Fatalf("Get: %v", err)
	}
	if _, err := Config("X"); !errors.As(err, &ce) || ce.Code != ErrDenied {
		t.Fatalf("Config: %v", err)
	}
}
