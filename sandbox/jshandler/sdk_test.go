package jshandler_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/jshandler"
)

// Real npm SDKs, installed unchanged in testdata/sdk (its package-lock.json; `make
// jshandler-sdks`), bundled into handlers that use the web platform the way pgflow users'
// handlers do. Each is a row of docs/guests.md's conformance table.

func loadSDK(t *testing.T, e sandbox.Engine, name string, mc sandbox.ModuleConfig) *jshandler.Module {
	t.Helper()
	if _, err := os.Stat(filepath.Join("testdata", "sdk", "node_modules")); err != nil {
		t.Fatal("testdata/sdk/node_modules is missing: run `make jshandler-sdks` (make test does)")
	}
	return load(t, e, filepath.Join("sdk", name), mc)
}

func runSDK(t *testing.T, m sandbox.Module, input any) map[string]any {
	t.Helper()
	in, _ := json.Marshal(input)
	res, err := run(t, m, string(in), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("%s: %v", res.Output, err)
	}
	return out
}

// zod (npm:zod@4.6.7, a Deno-style specifier) validates input with URLs, e-mails and dates.
func TestSDKZod(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := loadSDK(t, e, "zod.ts", sandbox.ModuleConfig{})
		out := runSDK(t, m, map[string]any{
			"good": map[string]any{"name": "Ada", "email": "ada@example.com", "site": "https://example.com/a", "when": "2024-01-02T15:04:05Z"},
			"bad":  map[string]any{"name": "", "email": "nope", "site": "not a url", "age": 1.5, "when": "yesterday"},
		})
		b, _ := json.Marshal(out)
		jsonEqual(t, b, `{"ok":{"name":"Ada","email":"ada@example.com","site":"https://example.com/a","tags":[],"when":"2024-01-02T15:04:05Z"},
			"issues":[["name","too_small"],["email","invalid_format"],["site","invalid_format"],["age","invalid_type"],["when","invalid_format"]]}`)
	})
}

// date-fns formats, adds business days, diffs and parses.
func TestSDKDateFns(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := loadSDK(t, e, "datefns.ts", sandbox.ModuleConfig{})
		out := runSDK(t, m, map[string]any{"at": "2024-01-05T15:04:05Z"})
		b, _ := json.Marshal(out)
		// 2024-01-05 is a Friday; three business days on is Wednesday the 10th; its ISO week
		// starts on Monday the 1st; 56 calendar days to 1 March (a leap year).
		jsonEqual(t, b, `{"valid":true,"formatted":"Friday, January 5th 2024 at 15:04","plus":"2024-01-10","days":56,"week":"2024-01-01","distance":"3 days"}`)
	})
}

func pemOf(t *testing.T, kind string, der []byte, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

// jose signs HS256, RS256 and ES256 JWTs with keys made by Go (PKCS #8 and SPKI PEM) and
// verifies them; Go's crypto verifies the tokens it made.
func TestSDKJose(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaPriv, err1 := x509.MarshalPKCS8PrivateKey(rsaKey)
	rsaPub, err2 := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	ecPriv, err3 := x509.MarshalPKCS8PrivateKey(ecKey)
	ecPub, err4 := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	input := map[string]any{
		"secret": "a-shared-secret-of-32-bytes-long!",
		"rsa":    map[string]string{"priv": pemOf(t, "PRIVATE KEY", rsaPriv, err1), "pub": pemOf(t, "PUBLIC KEY", rsaPub, err2)},
		"ec":     map[string]string{"priv": pemOf(t, "PRIVATE KEY", ecPriv, err3), "pub": pemOf(t, "PUBLIC KEY", ecPub, err4)},
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := loadSDK(t, e, "jose.ts", sandbox.ModuleConfig{})
		out := runSDK(t, m, input)
		if out["jwk"] != "P-256" {
			t.Errorf("exported JWK curve %v", out["jwk"])
		}
		for _, alg := range []string{"HS256", "RS256", "ES256"} {
			r, _ := out[alg].(map[string]any)
			if r == nil {
				t.Fatalf("%s: no result in %v", alg, out)
			}
			if r["sub"] != "user-1" || r["role"] != "worker" || r["tampered"] != "ERR_JWS_SIGNATURE_VERIFICATION_FAILED" {
				t.Errorf("%s: %v", alg, r)
			}
			token, _ := r["token"].(string)
			parts := strings.Split(token, ".")
			if len(parts) != 3 {
				t.Fatalf("%s: token %q", alg, token)
			}
			sig, err := base64.RawURLEncoding.DecodeString(parts[2])
			if err != nil {
				t.Fatal(err)
			}
			signed := []byte(parts[0] + "." + parts[1])
			sum := sha256.Sum256(signed)
			var ok bool
			switch alg {
			case "HS256":
				mac := hmac.New(sha256.New, []byte(input["secret"].(string)))
				mac.Write(signed)
				ok = hmac.Equal(mac.Sum(nil), sig)
			case "RS256":
				ok = rsa.VerifyPKCS1v15(&rsaKey.PublicKey, crypto.SHA256, sum[:], sig) == nil
			case "ES256":
				ok = len(sig) == 64 && ecdsa.Verify(&ecKey.PublicKey, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
			}
			if !ok {
				t.Errorf("%s: Go does not verify the handler's token %s", alg, token)
			}
		}
	})
}

// The openai SDK against a fake of its API on 127.0.0.1, allowed by the step's http grant:
// a completion, a streamed completion, a multipart file upload and an API error.
func TestSDKOpenAI(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test")
	var upload string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"message":"bad key","type":"invalid_request_error"}}`)
			return
		}
		switch r.URL.Path {
		case "/v1/chat/completions":
			var req struct {
				Stream   bool `json:"stream"`
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			reply := "echo: " + req.Messages[0].Content
			if req.Stream {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, part := range []string{"echo: ", req.Messages[0].Content} {
					fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", part)
				}
				_, _ = io.WriteString(w, "data: [DONE]\n\n")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, reply)
		case "/v1/files":
			f, h, err := r.FormFile("file")
			if err != nil || r.FormValue("purpose") != "batch" {
				w.WriteHeader(400)
				fmt.Fprintf(w, `{"error":{"message":%q}}`, fmt.Sprint(err))
				return
			}
			b, _ := io.ReadAll(f)
			upload = string(b)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"file-1","object":"file","bytes":%d,"created_at":0,"filename":%q,"purpose":"batch"}`, len(b), h.Filename)
		default:
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"message":"no models for you","type":"invalid_request_error"}}`)
		}
	}))
	defer srv.Close()
	pattern, err := httpcap.ParsePattern(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}, Env: sandbox.NewEnv([]string{"OPENAI_API_KEY"}, os.LookupEnv), Step: "ai"}
		m := loadSDK(t, e, "openai.ts", sandbox.ModuleConfig{Capabilities: caps})
		upload = ""
		out := runSDK(t, m, map[string]any{"baseURL": srv.URL + "/v1", "prompt": "hi"})
		b, _ := json.Marshal(out)
		jsonEqual(t, b, `{"reply":"echo: hi","usage":7,"streamed":"echo: hi","file":["file-1","batch.jsonl",8],"refused":"AuthenticationError 401"}`)
		if upload != "{\"a\":1}\n" {
			t.Errorf("uploaded %q", upload)
		}
	})
}

// @supabase/supabase-js against a fake of Supabase's API on 127.0.0.1, allowed by the step's
// http grant, the service key from env: PostgREST's select with filters and an insert,
// Storage's upload (its URL and FormData), an Edge Function call.
func TestSDKSupabase(t *testing.T) {
	t.Setenv("SUPABASE_SERVICE_ROLE_KEY", "service-key")
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		if r.Header.Get("apikey") != "service-key" || r.Header.Get("Authorization") != "Bearer service-key" {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"message":"no key"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/rest/v1/websites":
			_, _ = io.WriteString(w, `[{"id":1,"url":"https://a.example"}]`)
		case r.Method == "POST" && r.URL.Path == "/rest/v1/websites":
			var row map[string]any
			_ = json.Unmarshal(body, &row)
			row["id"] = 2
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(row)
		case r.Method == "POST" && r.URL.Path == "/storage/v1/object/pages/a/b.txt":
			if !strings.Contains(string(body), "hello") {
				w.WriteHeader(400)
				_, _ = io.WriteString(w, `{"message":"no file"}`)
				return
			}
			_, _ = io.WriteString(w, `{"Id":"f1","Key":"pages/a/b.txt"}`)
		case r.Method == "POST" && r.URL.Path == "/functions/v1/summarize":
			_ = json.NewEncoder(w).Encode(map[string]string{"summary": "of " + string(body)})
		default:
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"message":"not found"}`)
		}
	}))
	defer srv.Close()
	pattern, err := httpcap.ParsePattern(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}}, Env: sandbox.NewEnv([]string{"SUPABASE_SERVICE_ROLE_KEY"}, os.LookupEnv), Step: "db"}
		m := loadSDK(t, e, "supabase.ts", sandbox.ModuleConfig{Capabilities: caps})
		seen = nil
		out := runSDK(t, m, map[string]any{"url": srv.URL})
		b, _ := json.Marshal(out)
		jsonEqual(t, b, `{"rows":[{"id":1,"url":"https://a.example"}],"inserted":{"id":2,"url":"https://b.example"},"file":"a/b.txt","fn":{"summary":"of {\"id\":1}"}}`)
		want := []string{"GET /rest/v1/websites?select=id%2Curl&status=eq.new&order=id.asc&limit=2", "POST /rest/v1/websites?select=*",
			"POST /storage/v1/object/pages/a/b.txt", "POST /functions/v1/summarize"}
		if strings.Join(seen, "\n") != strings.Join(want, "\n") {
			t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
		}
	})
}
