package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRoutes(t *testing.T) {
	srv := httptest.NewServer(newHandler("tok"))
	defer srv.Close()
	do := func(method, path, auth, key, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/hello.json", "", "", ""); code != 200 || body != `{"hello":"world"}` {
		t.Errorf("hello: %d %s", code, body)
	}
	if code, _ := do("GET", "/missing", "", "", ""); code != 404 {
		t.Errorf("missing: %d", code)
	}
	order := `{"amount":1200,"currency":"eur"}`
	if code, _ := do("POST", "/charges", "Bearer nope", "k1", order); code != 401 {
		t.Errorf("wrong token: %d", code)
	}
	if code, _ := do("POST", "/charges", "Bearer tok", "", order); code != 400 {
		t.Errorf("no key: %d", code)
	}
	code, first := do("POST", "/charges", "Bearer tok", "k1", order)
	_, again := do("POST", "/charges", "Bearer tok", "k1", order)
	_, other := do("POST", "/charges", "Bearer tok", "k2", order)
	if code != 200 || first != again || first == other || !strings.HasPrefix(first, `{"id":"ch_`) {
		t.Errorf("charges: %d %s / %s / %s", code, first, again, other)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	if err := run("0.0.0.0:0", 0, "tok"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("run on 0.0.0.0: %v", err)
	}
	if err := run("127.0.0.1:0", 0, ""); err == nil || !strings.Contains(err.Error(), "PAYMENTS_TOKEN") {
		t.Errorf("run without a token: %v", err)
	}
}
