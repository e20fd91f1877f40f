package jshandler_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox"
)

// webPlatformCases are what testdata/webplatform.ts observes of each part of the web
// platform, as the standards (WHATWG URL, DOM, Fetch, Streams, Encoding, HTML, Web Crypto
// with the RFCs' test vectors, ECMA-402 in en-US) and Node's documentation say: the rows of
// docs/guests.md's conformance table.
var webPlatformCases = map[string]string{
	// WHATWG URL: serialising, setters, searchParams, IDNA (UTS #46), IPv6 and IPv4 forms, file
	// and blob URLs, failures.
	"url": `{"before":"https://user:pw@example.com/a/c%20d?x=1#frag","after":"http://example.com:8080/new%20path?x=1&q=a+b%26c",
		"host":"example.com:8080","rel":"http://h/a/x?y#z","idna":"xn--mnchen-3ya.de","ipv6":"[::1]","ipv4":"127.0.0.1",
		"file":"file:///C:/y","blob":"https://a.example","params":"a=1&a=3&b=2","size":3,"hasValue":true,"invalid":"TypeError",
		"canParse":[true,false,true]}`,
	// DOM: AbortController, AbortSignal.timeout (a real wait), any, abort; fetch with an aborted
	// signal, ours or another library's.
	"abort": `{"aborted":true,"reason":"AbortError","seen":["abort","onabort"],"early":false,"timeout":true,"timeoutReason":"TimeoutError",
		"any":[true,"why"],"fetch":"AbortError","throwIfAborted":"AbortError","ctor":"TypeError","foreign":"AbortError"}`,
	// DOM: EventTarget (once, removal), CustomEvent, preventDefault.
	"events": `{"seen":["x","once:x","x"],"detail":{"a":1},"prevented":true}`,
	// File API and XHR's FormData: Blob, File, slice, FormData and its multipart body.
	"blob": `{"size":12,"type":"text/plain","text":"héllo world","slice":"world","file":["a.txt",42,12,true],"all":["x","y"],
		"keys":["name","file","name","k"],"fileBack":"a.txt","multipart":true,"contentType":true,"streamed":"héllo world"}`,
	// Streams: a ReadableStream body, a body's reader, TransformStream, a body read twice.
	"streams": `{"text":"ab","used":true,"first":"chunked","transformed":"X","again":"TypeError"}`,
	// Fetch: Headers (set-cookie, combining, names), Request (method, clone, body, GET with a
	// body, a relative URL), Response (json, error, redirect); a WebSocket refused.
	"fetchtypes": `{"cookies":["a=1","b=2"],"xb":"1, 2","entries":3,"badName":"TypeError","method":"POST","url":"http://h/p","body":"hi",
		"cloneBody":"hi","ctype":"text/plain;charset=UTF-8","res":[201,true,"application/json",{"a":1}],"error":"error",
		"redirect":"http://h/x","getBody":"TypeError","relative":"TypeError","websocket":"NotSupportedError"}`,
	// Encoding and HTML's base64: encodeInto, decoding a character split across chunks
	// (stream: true, TextDecoderStream), the BOM, fatal decoding, atob and btoa.
	"text": `{"encodeInto":[2,3],"streamed":"é€","piped":"é€","bom":"a","keepBom":2,"fatal":"TypeError","btoa":"aGkh/w==","atob":"hi!ÿ",
		"badAtob":"InvalidCharacterError","badBtoa":"InvalidCharacterError"}`,
	// HTML's structuredClone: dates, maps, sets, bigints, regexps, typed arrays, cycles; functions refused.
	"clone": `{"date":true,"map":true,"set":true,"re":"/a+/gi","u8":[1,2],"cyclic":true,"fn":"DataCloneError"}`,
	// queueMicrotask runs before timers, in order with promise jobs.
	"microtasks": `["sync","micro","promise","timeout"]`,
	// Timers wait in real time; setInterval repeats until cleared; clearTimeout; at most 10,000 pending.
	"timers": `{"waited":true,"n":3,"cleared":true,"pending":10000,
		"cap":"RangeError: setTimeout: 10000 timers are already pending, the most a task may have: clear the ones it no longer needs (clearTimeout, clearInterval)"}`,
	// Web Crypto on Go's crypto: SHA-256 of "abc" (FIPS 180-2), HMAC-SHA-256 (RFC 4231 case 2),
	// AES-GCM with additional data, ECDSA P-256 through SPKI, PKCS #8 and JWK, RSASSA-PKCS1-v1_5,
	// RSA-PSS, Ed25519, PBKDF2-HMAC-SHA1 (RFC 6070 case 1), refusals.
	"crypto": `{"uuid":true,"sha":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"hmac":"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843","hmacVerify":true,"pt":"secret","ctLen":22,
		"tampered":"OperationError","ecdsa":[64,true,true,false],"jwk":["EC","P-256","string"],"rsa":[2048,true,false],
		"notExtractable":"InvalidAccessError","pssWithPkcs1Sig":false,"ed25519":true,"pbkdf2":"0c60c80f961f0e71f3a9b524af6012062fe037a6",
		"badKey":"DataError","wrongUsage":"InvalidAccessError"}`,
	// ECMA-402 in en-US and UTC: numbers, currencies, percentages, rounding, dates and times, plurals.
	"intl": `{"number":"1,234,567.891","usd":"$1,234.50","eur":"-€3.00","percent":"26%","fixed":"1.01","locale":"12,345.6","date":"1/2/2024",
		"medium":"Jan 2, 2024","long":"Tuesday, January 2, 2024 at 3:04 PM","parts":"15:04","zone":"UTC","plural":["one","two"],"otherZone":"RangeError"}`,
	// Deno.env.get: the step's granted names; any other is undefined.
	"deno": `{"granted":"tok_123","unlisted":null,"has":true}`,
	// node:buffer, node:crypto (MD5 of "abc" per RFC 1321, HMAC as above), node:events, node:util.
	"node": `{"buffer":["aMOpbGxv","hi\n",true],"sha":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"md5":"900150983cd24fb0d6963f7d28e17f72","hmac":"W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM=","random":16,"events":[1],
		"format":"a=1 {\"b\":2}","promisify":42}`,
}

func TestWebPlatform(t *testing.T) {
	t.Setenv("API_TOKEN", "tok_123")
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		caps := sandbox.Capabilities{Env: sandbox.NewEnv([]string{"API_TOKEN"}, os.LookupEnv), Step: "web"}
		m := load(t, e, "webplatform.ts", sandbox.ModuleConfig{Capabilities: caps})
		for _, name := range []string{"url", "abort", "events", "blob", "streams", "fetchtypes", "text", "clone", "microtasks", "timers", "crypto", "intl", "deno", "node"} {
			t.Run(name, func(t *testing.T) {
				res, err := run(t, m, fmt.Sprintf(`{"case": %q}`, name), 20*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				want, ok := webPlatformCases[name]
				if !ok {
					t.Fatalf("no expectation; got %s", res.Output)
				}
				jsonEqual(t, res.Output, want)
			})
		}
	})
}

// Top-level code may use crypto.subtle, which reaches nothing, to import a key once for every
// task; generating one there is refused, as every task would share it.
func TestTopLevelCodeMayImportKeys(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "toplevel_crypto.ts", sandbox.ModuleConfig{})
		res, err := run(t, m, `{"data": "what do ya want for nothing?"}`, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, res.Output, `{"mac":"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
			"generated":"crypto.subtle.generateKey is not available while the handler module loads: its top-level code runs once, when the worker loads the step, and a key made there would be shared by every task; generate keys inside the handler"}`)
	})
}

// The web-platform-tests' own URL data: every input of urltestdata.json that has no base, with
// whether the URL standard refuses it, as the npm package @wordpress/url ships them (pinned in
// testdata/sdk's package-lock.json, read from its node_modules): URL parses each one the
// standard parses and refuses each one it refuses.
func TestURLAgainstWebPlatformTests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "sdk", "node_modules", "@wordpress", "url", "src", "test", "fixtures", "wpt-data.json"))
	if err != nil {
		t.Fatalf("%v: run `make jshandler-sdks` (make test does)", err)
	}
	forEachEngine(t, func(t *testing.T, e sandbox.Engine) {
		m := load(t, e, "wpturl.ts", sandbox.ModuleConfig{})
		res, err := run(t, m, `{"cases": `+string(data)+`}`, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Cases int      `json:"cases"`
			Wrong []string `json:"wrong"`
		}
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		if out.Cases < 300 || len(out.Wrong) > 0 {
			t.Errorf("%d cases, %d wrong:\n%s", out.Cases, len(out.Wrong), strings.Join(out.Wrong, "\n"))
		}
	})
}
