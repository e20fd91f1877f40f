// Command demoapi is the small HTTP API `make run` starts on loopback for the example flows
// that act on the world (flows.yaml: fetch_demo and checkout). It is not part of the
// worker. Routes:
//
//	GET  /hello.json  {"hello":"world"}
//	GET  /missing     404
//	POST /charges     a payments API: needs "Authorization: Bearer $PAYMENTS_TOKEN" and an
//	                  Idempotency-Key; the same key always gets the same charge id
//
// It prints "listening on ADDR" once it accepts connections, and exits on SIGINT or
// SIGTERM, or after -lifetime in case whoever started it died without stopping it.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18480", "address to listen on (loopback only)")
	lifetime := flag.Duration("lifetime", 15*time.Minute, "exit after this long whatever happens")
	flag.Parse()
	if err := run(*addr, *lifetime, os.Getenv("PAYMENTS_TOKEN")); err != nil {
		fmt.Fprintln(os.Stderr, "demoapi:", err)
		os.Exit(1)
	}
}

func run(addr string, lifetime time.Duration, token string) error {
	if token == "" {
		return errors.New("PAYMENTS_TOKEN is not set: the /charges route checks it")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %s: listen on a loopback address only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w (another `make run` still running? stop it, or change the port in flows.yaml and scripts/run-examples.sh)", err)
	}
	srv := &http.Server{Handler: newHandler(token), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, lifetime)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	fmt.Println("listening on", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"hello":"world"}`)
	})
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		var order struct {
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if key == "" || json.Unmarshal(body, &order) != nil || order.Amount <= 0 || order.Currency == "" {
			http.Error(w, `{"error":"an Idempotency-Key and a JSON body with amount and currency are required"}`, http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256([]byte(key))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"ch_%s","status":"succeeded","amount":%d,"currency":%q}`, hex.EncodeToString(sum[:6]), order.Amount, order.Currency)
	})
	return mux
}
