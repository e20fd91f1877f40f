package jshandler_test

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/httpcap"
)

// sigV4 checks an S3 request's AWS Signature Version 4 (Authorization header form) as S3
// does: the canonical request rebuilt from what arrived, the signing key derived from the
// secret, the payload's sha256 against the body. It returns the access key id, or why the
// request is refused.
func sigV4(r *http.Request, body []byte, secrets map[string]string, now time.Time) (string, error) {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", fmt.Errorf("no AWS4-HMAC-SHA256 Authorization")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || scope[3] != "s3" || scope[4] != "aws4_request" {
		return "", fmt.Errorf("credential scope %q", fields["Credential"])
	}
	secret, ok := secrets[scope[0]]
	if !ok {
		return "", fmt.Errorf("unknown access key %q", scope[0])
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, scope[1]) || at.Sub(now).Abs() > 15*time.Minute {
		return "", fmt.Errorf("x-amz-date %q is not the scope's day or not within 15 minutes", amzDate)
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	sum := sha256.Sum256(body)
	if payloadHash != hex.EncodeToString(sum[:]) {
		return "", fmt.Errorf("x-amz-content-sha256 %q is not the body's", payloadHash)
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	for _, must := range []string{"host", "x-amz-date", "x-amz-content-sha256"} {
		if !slices.Contains(signed, must) {
			return "", fmt.Errorf("%s is not signed", must)
		}
	}
	var headers strings.Builder
	for _, name := range signed {
		v := r.Header.Values(name)
		if name == "host" {
			v = []string{r.Host}
		}
		if len(v) == 0 {
			return "", fmt.Errorf("signed header %s is missing", name)
		}
		for i := range v {
			v[i] = strings.Join(strings.Fields(v[i]), " ")
		}
		fmt.Fprintf(&headers, "%s:%s\n", name, strings.Join(v, ","))
	}
	path, rawQuery, _ := strings.Cut(r.RequestURI, "?")
	var query []string
	if rawQuery != "" {
		for _, kv := range strings.Split(rawQuery, "&") {
			k, v, _ := strings.Cut(kv, "=")
			dk, err1 := url.QueryUnescape(k)
			dv, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil {
				return "", fmt.Errorf("query %q", rawQuery)
			}
			query = append(query, awsEscape(dk)+"="+awsEscape(dv))
		}
	}
	slices.Sort(query)
	canonical := strings.Join([]string{r.Method, path, strings.Join(query, "&"), headers.String(), fields["SignedHeaders"], payloadHash}, "\n")
	crSum := sha256.Sum256([]byte(canonical))
	toSign := strings.Join([]string{"AWS4-HMAC-SHA256", amzDate, strings.Join(scope[1:], "/"), hex.EncodeToString(crSum[:])}, "\n")
	key := []byte("AWS4" + secret)
	for _, part := range append(scope[1:], toSign) {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(part))
		key = m.Sum(nil)
	}
	want, err := hex.DecodeString(fields["Signature"])
	if err != nil || !hmac.Equal(key, want) {
		return "", fmt.Errorf("the signature does not match")
	}
	return scope[0], nil
}

// awsEscape is SigV4's URI encoding: everything but A-Z a-z 0-9 - _ . ~ as %XX.
func awsEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// @aws-sdk/client-s3 (its browser runtime config, fetch and SigV4 signing through
// crypto.subtle) against a fake of S3 on 127.0.0.1 that verifies every request's signature
// with Go's crypto: PutObject of a key that needs escaping, GetObject of it, and a request
// signed with a wrong secret that the fake refuses as S3 does.
func TestSDKS3(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret/with+chars")
	secrets := map[string]string{"AKIDTEST": "secret/with+chars"}
	type object struct {
		body        []byte
		contentType string
	}
	var mu sync.Mutex
	objects := map[string]object{}
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, err := sigV4(r, body, secrets, time.Now())
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s %s %v", r.Method, r.URL.EscapedPath(), err))
		if err != nil {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(403)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error>`, err)
			return
		}
		switch r.Method {
		case "PUT":
			if c := r.Header.Get("X-Amz-Checksum-Crc32"); c != "" {
				var sum [4]byte
				binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(body))
				if c != base64.StdEncoding.EncodeToString(sum[:]) {
					w.WriteHeader(400)
					_, _ = io.WriteString(w, `<Error><Code>BadDigest</Code><Message>crc32</Message></Error>`)
					return
				}
			}
			objects[r.URL.Path] = object{body: body, contentType: r.Header.Get("Content-Type")}
			w.Header().Set("ETag", fmt.Sprintf(`"%x"`, md5.Sum(body)))
		case "GET":
			o, ok := objects[r.URL.Path]
			if !ok {
				w.WriteHeader(404)
				_, _ = io.WriteString(w, `<Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>`)
				return
			}
			w.Header().Set("Content-Type", o.contentType)
			w.Header().Set("ETag", fmt.Sprintf(`"%x"`, md5.Sum(o.body)))
			_, _ = w.Write(o.body)
		default:
			w.WriteHeader(405)
		}
	}))
	defer srv.Close()
	pattern, err := httpcap.ParsePattern(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{HTTP: &httpcap.Policy{Allow: []httpcap.Pattern{pattern}},
			Env: sandbox.NewEnv([]string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, os.LookupEnv), Step: "store"}
		m := loadSDK(t, e, "s3.ts", sandbox.ModuleConfig{Capabilities: caps})
		mu.Lock()
		seen, objects = nil, map[string]object{}
		mu.Unlock()
		out := runSDK(t, m, map[string]any{"endpoint": srv.URL})
		b, _ := json.Marshal(out)
		jsonEqual(t, b, fmt.Sprintf(`{"etag":"\"%x\"","body":"hello, S3","type":"text/plain","refused":"true SignatureDoesNotMatch 403"}`, md5.Sum([]byte("hello, S3"))))
		want := []string{"PUT /pages/a%20b/%C3%BC.txt <nil>", "GET /pages/a%20b/%C3%BC.txt <nil>", "GET /pages/a%20b/%C3%BC.txt the signature does not match"}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(seen, "\n") != strings.Join(want, "\n") {
			t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
		}
	})
}
