package compute

import (
	"encoding/json"
	"strings"
	"testing"
)

func call(t *testing.T, req string) (map[string]any, error) {
	t.Helper()
	out, err := Call([]byte(req))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return m, nil
}

// A host call cannot be stopped at the step's deadline, so what could run for long is
// refused up front; every refusal names the DOMException the guest throws.
func TestCostlyOperationsAreBounded(t *testing.T) {
	for req, want := range map[string]string{
		`{"op":"deriveBits","alg":{"name":"PBKDF2","hash":"SHA-256","salt":"c2FsdA==","iterations":1000000000},"jwk":{"kty":"oct","k":"cHc"},"length":256}`: "OperationError: PBKDF2 takes 1 to 2000000 iterations",
		`{"op":"generate","alg":{"name":"RSASSA-PKCS1-v1_5","hash":"SHA-256","modulusLength":16384}}`:                                                       "OperationError: the modulus length is 16384: 2048 to 4096 bits",
		`{"op":"mine bitcoin"}`:                  `NotSupportedError: the operation "mine bitcoin" does not exist`,
		`{"op":"digest","hash":"MD5","data":""}`: `NotSupportedError: the hash "MD5" is not supported`,
		`{"op":"import","format":"spki","alg":{"name":"ECDSA","namedCurve":"P-256"},"data":"AQID"}`: "DataError: the SPKI key does not parse",
	} {
		_, err := call(t, req)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", req, err, want)
		}
	}
	if _, err := Call(make([]byte, maxRequest+1)); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("an oversized request: %v", err)
	}
}

// MD5 exists for node:crypto's createHash only (legacy), never for crypto.subtle.
func TestMD5OnlyForNodeCrypto(t *testing.T) {
	m, err := call(t, `{"op":"digest","hash":"MD5","data":"YWJj","legacy":true}`)
	if err != nil || m["data"] != "kAFQmDzST7DWlj99KOF/cg==" {
		t.Errorf("md5(abc): %v %v", m, err)
	}
}

// Host names go to ASCII as the URL standard's domain to ASCII does (UTS #46, not strict).
func TestIDNA(t *testing.T) {
	for in, want := range map[string]any{"münchen.de": "xn--mnchen-3ya.de", "EXAMPLE.com": "example.com", "faß.de": "xn--fa-hia.de", "a\u200db.com": nil} {
		m, err := call(t, `{"op":"idna","domain":"`+in+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			if m["error"] != true {
				t.Errorf("%q: %v, want an error (a joiner out of context)", in, m)
			}
		} else if m["domain"] != want {
			t.Errorf("%q: %v, want %v", in, m, want)
		}
	}
}
