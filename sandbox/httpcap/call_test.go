package httpcap

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/abi"
)

// hangingServer answers /hang never (until its client goes away) and /hello at once; closed
// receives one value for every connection the server saw closed, arrived one for every
// request to /hang.
func hangingServer(t *testing.T) (srv *httptest.Server, closed, arrived <-chan struct{}) {
	t.Helper()
	c, a := make(chan struct{}, 16), make(chan struct{}, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		a <- struct{}{}
		<-r.Context().Done()
	})
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hi")) })
	srv = httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			c <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, c, a
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never happened", what)
	}
}

// goroutinesBack waits for the goroutine count to come back to before (the call's goroutine
// and the transport's connection goroutines end once the connection is closed).
func goroutinesBack(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before the request:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCanceledCallClosesItsConnection(t *testing.T) {
	srv, closed, arrived := hangingServer(t)
	obs := &counts{}
	s := policy(t, hostPort(srv)).NewSession(where, obs)
	defer s.Close()
	before := runtime.NumGoroutine()
	c, err := s.Start(context.Background(), Request{URL: srv.URL + "/hang"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, arrived, "the request reaching the server")
	if c.Wait(context.Background(), 50*time.Millisecond) {
		t.Fatal("a request to a server that never answers ended")
	}
	c.Cancel()
	waitFor(t, closed, "the server seeing the canceled request's connection closed")
	_, rerr := c.Result()
	wantError(t, rerr, abi.ErrCanceled, "GET "+hostPort(srv)+" was canceled by the handler")
	if obs.requests[hostPort(srv)+" canceled"] != 1 {
		t.Errorf("observed %v, want one canceled request", obs.requests)
	}
	srv.CloseClientConnections()
	goroutinesBack(t, before)
}

func TestClosingTheSessionCancelsItsCall(t *testing.T) {
	srv, closed, arrived := hangingServer(t)
	s := policy(t, hostPort(srv)).NewSession(where, nil)
	c, err := s.Start(context.Background(), Request{URL: srv.URL + "/hang"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, arrived, "the request reaching the server")
	s.Close()
	waitFor(t, closed, "the server seeing the connection closed with the session")
	if !c.Wait(context.Background(), 0) {
		t.Fatal("the call still runs after Close")
	}
	_, rerr := c.Result()
	wantError(t, rerr, abi.ErrCanceled)
}

func TestStartedCallAnswersAsDo(t *testing.T) {
	srv, _, _ := hangingServer(t)
	s := policy(t, hostPort(srv)).NewSession(where, nil)
	defer s.Close()
	c, err := s.Start(context.Background(), Request{URL: srv.URL + "/hello"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Wait(context.Background(), -1) {
		t.Fatal("Wait without a limit returned before the call ended")
	}
	resp, rerr := c.Result()
	if rerr != nil || resp.Status != 200 || string(resp.Body) != "hi" {
		t.Fatalf("%+v, %v", resp, rerr)
	}
	// Cancelling a call that ended leaves its answer.
	c.Cancel()
	if resp2, rerr := c.Result(); rerr != nil || resp2 != resp {
		t.Errorf("after Cancel: %+v, %v", resp2, rerr)
	}
}

func TestOneRequestRunsAtATime(t *testing.T) {
	srv, _, _ := hangingServer(t)
	s := policy(t, hostPort(srv)).NewSession(where, nil)
	defer s.Close()
	c, err := s.Start(context.Background(), Request{URL: srv.URL + "/hang"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Start(context.Background(), Request{URL: srv.URL + "/hello"})
	wantError(t, err, abi.ErrBadRequest, "a request is already running")
	_, err = s.Do(context.Background(), Request{URL: srv.URL + "/hello"})
	wantError(t, err, abi.ErrBadRequest, "a request is already running")
	c.Cancel()
	if resp, err := s.Do(context.Background(), Request{URL: srv.URL + "/hello"}); err != nil || resp.Status != 200 {
		t.Fatalf("after the cancel: %+v, %v", resp, err)
	}
}

func TestRefusedStartSendsNothing(t *testing.T) {
	srv, _, _ := hangingServer(t)
	obs := &counts{}
	s := policy(t, hostPort(srv)).NewSession(where, obs)
	defer s.Close()
	c, err := s.Start(context.Background(), Request{URL: "http://unlisted.example/"})
	if c != nil {
		t.Fatal("a refused request got a call")
	}
	wantError(t, err, abi.ErrHostNotAllowed)
	if obs.denied["host_not_allowed"] != 1 || len(obs.requests) != 0 {
		t.Errorf("denied %v, requests %v", obs.denied, obs.requests)
	}
}

func TestDeadlineEndsAStartedCall(t *testing.T) {
	srv, closed, arrived := hangingServer(t)
	s := policy(t, hostPort(srv)).NewSession(where, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c, err := s.Start(ctx, Request{URL: srv.URL + "/hang"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, arrived, "the request reaching the server")
	if c.Wait(ctx, -1) && ctx.Err() == nil {
		t.Fatal("the call ended before the deadline")
	}
	_, rerr := c.Result()
	wantError(t, rerr, abi.ErrNetwork, "the task's deadline passed")
	waitFor(t, closed, "the server seeing the connection closed at the deadline")
}
