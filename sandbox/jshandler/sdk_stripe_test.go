package jshandler_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// stripe's SDK (its worker build, with Stripe.createFetchHttpClient()) against a fake of
// Stripe's API on 127.0.0.1, allowed by the step's http grant, the secret key from env: a
// customer created (form-encoded, with an idempotency key) and listed, an API error as
// stripe's error class, and a webhook whose signature Go made checked by crypto.subtle.
func TestSDKStripe(t *testing.T) {
	t.Setenv("STRIPE_SECRET_KEY", "sk_test_123")
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer sk_test_123" || r.Header.Get("Stripe-Version") == "" {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`)
			return
		}
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/customers":
			if r.Header.Get("Idempotency-Key") == "" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
				w.WriteHeader(400)
				_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"no idempotency key or not a form"}}`)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "cus_1", "object": "customer", "email": r.PostForm.Get("email"),
				"name": r.PostForm.Get("name"), "metadata": map[string]string{"order": r.PostForm.Get("metadata[order]")}})
		case r.Method == "GET" && r.URL.Path == "/v1/customers" && r.URL.Query().Get("limit") == "2":
			_, _ = io.WriteString(w, `{"object":"list","url":"/v1/customers","has_more":true,"data":[{"id":"cus_1","object":"customer"},{"id":"cus_0","object":"customer"}]}`)
		default:
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"id","message":"No such customer"}}`)
		}
	}))
	defer srv.Close()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	pattern, err := httpcap.ParsePattern(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	// A webhook as Stripe signs it: HMAC-SHA256 of "timestamp.payload" with the endpoint's secret.
	secret := "whsec_test"
	payload := `{"id":"evt_1","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","status":"paid"}}}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + payload))
	header := fmt.Sprintf("t=%s,v1=%s", ts, hex.EncodeToString(mac.Sum(nil)))
	p, _ := strconv.Atoi(port)
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}, Env: sandbox.NewEnv([]string{"STRIPE_SECRET_KEY"}, os.LookupEnv), Step: "charge"}
		m := loadSDK(t, e, "stripe.ts", sandbox.ModuleConfig{Capabilities: caps})
		mu.Lock()
		seen = nil
		mu.Unlock()
		out := runSDK(t, m, map[string]any{"host": host, "port": p, "webhook": map[string]string{"payload": payload, "header": header, "secret": secret}})
		b, _ := json.Marshal(out)
		jsonEqual(t, b, `{"created":["cus_1","ada@example.com","o-1"],"listed":["cus_1","cus_0"],"more":true,
			"missing":"StripeInvalidRequestError 404 resource_missing","event":["evt_1","invoice.paid"],"forged":"StripeSignatureVerificationError"}`)
		want := []string{"POST /v1/customers", "GET /v1/customers?limit=2", "GET /v1/customers/cus_missing"}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(seen, "\n") != strings.Join(want, "\n") {
			t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
		}
	})
}
