// Package compute does, for the compute_call import, what JavaScript handlers would otherwise
// carry large or slow code for: the Web Crypto operations (crypto.subtle, node:crypto's
// hashes) with Go's crypto packages, well-tested and constant-time, and IDNA host names
// (UTS #46) with golang.org/x/net/idna. It reads no file and sends nothing: its only inputs
// are the request's bytes and the host's randomness.
//
// A request is JSON: {"op": ..., "alg": {...}, "keyAlg": {...}, "jwk": {...}, "data": ...},
// bytes in standard base64 and keys as JWKs (the guest keeps each key as its JWK and sends it
// with every operation). An answer is JSON too; an error's text starts with the name of the
// DOMException the guest throws ("DataError: ...").
package compute

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/md5"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"math/big"
	"strings"
)

// Error is a failed operation: Name is the DOMException's ("DataError", "NotSupportedError",
// "OperationError", "InvalidAccessError").
type Error struct{ Name, Msg string }

func (e *Error) Error() string { return e.Name + ": " + e.Msg }

func errf(name, format string, args ...any) *Error {
	return &Error{Name: name, Msg: fmt.Sprintf(format, args...)}
}

// maxRequest bounds one request (the guest's memory bounds it too).
const maxRequest = 64 << 20

// A host call cannot be stopped at the step's deadline: the costly operations are bounded so
// that none takes more than about a second (PBKDF2's iterations, an RSA key's size).
const (
	maxIterations    = 2_000_000
	maxModulusLength = 4096
)

// Alg is an algorithm's parameters as the guest sends them (names canonical, bytes base64).
type Alg struct {
	Name           string `json:"name"`
	Hash           string `json:"hash,omitempty"`
	NamedCurve     string `json:"namedCurve,omitempty"`
	Length         int    `json:"length,omitempty"`
	ModulusLength  int    `json:"modulusLength,omitempty"`
	PublicExponent []byte `json:"publicExponent,omitempty"`
	SaltLength     *int   `json:"saltLength,omitempty"`
	IV             []byte `json:"iv,omitempty"`
	AdditionalData []byte `json:"additionalData,omitempty"`
	TagLength      int    `json:"tagLength,omitempty"`
	Salt           []byte `json:"salt,omitempty"`
	Info           []byte `json:"info,omitempty"`
	Iterations     int    `json:"iterations,omitempty"`
}

// JWK is a JSON Web Key (RFC 7517); its numbers are base64url without padding.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	D   string `json:"d,omitempty"`
	N   string `json:"n,omitempty"`
	E   string `json:"e,omitempty"`
	P   string `json:"p,omitempty"`
	Q   string `json:"q,omitempty"`
	DP  string `json:"dp,omitempty"`
	DQ  string `json:"dq,omitempty"`
	QI  string `json:"qi,omitempty"`
	K   string `json:"k,omitempty"`
	Alg string `json:"alg,omitempty"`
}

type request struct {
	Op        string          `json:"op"`
	Hash      string          `json:"hash"`
	Format    string          `json:"format"`
	Alg       json.RawMessage `json:"alg"`
	KeyAlg    Alg             `json:"keyAlg"`
	JWK       *JWK            `json:"jwk"`
	Data      []byte          `json:"data"`
	Signature []byte          `json:"signature"`
	Key       []byte          `json:"key"`
	Length    *int            `json:"length"`
	Legacy    bool            `json:"legacy"`
	Domain    string          `json:"domain"`
}

// key is an imported or generated key: its JWK, type and algorithm as CryptoKey shows it.
type key struct {
	JWK  *JWK   `json:"jwk"`
	Type string `json:"type"`
	Alg  Alg    `json:"alg"`
}

// Call runs one request and returns the answer's JSON.
func Call(req []byte) ([]byte, error) {
	if len(req) > maxRequest {
		return nil, errf("OperationError", "the request is %d bytes, over the %d a crypto call takes", len(req), maxRequest)
	}
	var r request
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, errf("OperationError", "the request is not valid: %v", err)
	}
	var alg Alg
	if len(r.Alg) > 0 {
		// The name alone ("SHA-256") or the object.
		var name string
		if json.Unmarshal(r.Alg, &name) == nil {
			alg.Name = name
		} else if err := json.Unmarshal(r.Alg, &alg); err != nil {
			return nil, errf("OperationError", "the algorithm is not valid: %v", err)
		}
	}
	out, err := run(&r, alg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

func run(r *request, alg Alg) (any, error) {
	switch r.Op {
	case "digest":
		h, err := hashOf(r.Hash, r.Legacy)
		if err != nil {
			return nil, err
		}
		d := h.New()
		d.Write(r.Data)
		return map[string][]byte{"data": d.Sum(nil)}, nil
	case "hmac":
		h, err := hashOf(r.Hash, r.Legacy)
		if err != nil {
			return nil, err
		}
		m := hmac.New(h.New, r.Key)
		m.Write(r.Data)
		return map[string][]byte{"data": m.Sum(nil)}, nil
	case "import":
		return importKey(r.Format, alg, r.Data, r.JWK)
	case "export":
		return exportKey(r.Format, alg.Name, r.JWK)
	case "generate":
		return generate(alg)
	case "sign":
		sig, err := sign(alg, r.KeyAlg, r.JWK, r.Data)
		if err != nil {
			return nil, err
		}
		return map[string][]byte{"data": sig}, nil
	case "verify":
		ok, err := verify(alg, r.KeyAlg, r.JWK, r.Signature, r.Data)
		if err != nil {
			return nil, err
		}
		return map[string]bool{"ok": ok}, nil
	case "encrypt", "decrypt":
		out, err := aesGCM(r.Op == "encrypt", alg, r.KeyAlg, r.JWK, r.Data)
		if err != nil {
			return nil, err
		}
		return map[string][]byte{"data": out}, nil
	case "idna":
		return idnaToASCII(r.Domain)
	case "deriveBits":
		out, err := deriveBits(alg, r.JWK, r.Length)
		if err != nil {
			return nil, err
		}
		return map[string][]byte{"data": out}, nil
	}
	return nil, errf("NotSupportedError", "the operation %q does not exist", r.Op)
}

func hashOf(name string, legacy bool) (crypto.Hash, error) {
	switch strings.ToUpper(name) {
	case "SHA-1":
		return crypto.SHA1, nil
	case "SHA-256":
		return crypto.SHA256, nil
	case "SHA-384":
		return crypto.SHA384, nil
	case "SHA-512":
		return crypto.SHA512, nil
	case "MD5":
		if legacy { // node:crypto's createHash("md5"); Web Crypto has no MD5
			return crypto.MD5, nil
		}
	}
	return 0, errf("NotSupportedError", "the hash %q is not supported: SHA-1, SHA-256, SHA-384 and SHA-512 are", name)
}

// Keep the hash packages linked: crypto.Hash.New needs them registered.
var _ = []func() hash.Hash{md5.New, sha1.New, sha256.New, sha512.New}

var (
	b64u = base64.RawURLEncoding
)

func enc(b []byte) string { return b64u.EncodeToString(b) }

func dec(field, s string) ([]byte, error) {
	b, err := b64u.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, errf("DataError", "the JWK's %q is not base64url: %v", field, err)
	}
	return b, nil
}

func decInt(field, s string) (*big.Int, error) {
	b, err := dec(field, s)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errf("DataError", "the JWK has no %q", field)
	}
	return new(big.Int).SetBytes(b), nil
}

// ---- keys -------------------------------------------------------------------------------------

func curveOf(name string) (elliptic.Curve, error) {
	switch name {
	case "P-256":
		return elliptic.P256(), nil
	case "P-384":
		return elliptic.P384(), nil
	case "P-521":
		return elliptic.P521(), nil
	}
	return nil, errf("NotSupportedError", "the curve %q is not supported: P-256, P-384 and P-521 are", name)
}

func isRSA(name string) bool {
	return name == "RSASSA-PKCS1-v1_5" || name == "RSA-PSS" || name == "RSA-OAEP"
}

func importKey(format string, alg Alg, data []byte, jwk *JWK) (*key, error) {
	switch {
	case alg.Name == "HMAC" || alg.Name == "AES-GCM" || alg.Name == "HKDF" || alg.Name == "PBKDF2":
		var k []byte
		switch format {
		case "raw":
			k = data
		case "jwk":
			if jwk == nil || jwk.Kty != "oct" {
				return nil, errf("DataError", "a %s key in JWK form must have kty \"oct\"", alg.Name)
			}
			var err error
			if k, err = dec("k", jwk.K); err != nil {
				return nil, err
			}
		default:
			return nil, errf("NotSupportedError", "a %s key is imported as raw or jwk, not %s", alg.Name, format)
		}
		out := &key{JWK: &JWK{Kty: "oct", K: enc(k)}, Type: "secret", Alg: Alg{Name: alg.Name}}
		switch alg.Name {
		case "HMAC":
			if _, err := hashOf(alg.Hash, false); err != nil {
				return nil, err
			}
			if len(k) == 0 {
				return nil, errf("DataError", "an HMAC key cannot be empty")
			}
			out.Alg.Hash, out.Alg.Length = alg.Hash, len(k)*8
		case "AES-GCM":
			if n := len(k); n != 16 && n != 24 && n != 32 {
				return nil, errf("DataError", "an AES key is 16, 24 or 32 bytes, not %d", n)
			}
			out.Alg.Length = len(k) * 8
		}
		return out, nil
	case isRSA(alg.Name):
		if _, err := hashOf(alg.Hash, false); err != nil {
			return nil, err
		}
		var pub *rsa.PublicKey
		var priv *rsa.PrivateKey
		switch format {
		case "spki":
			k, err := x509.ParsePKIXPublicKey(data)
			if err != nil {
				return nil, errf("DataError", "the SPKI key does not parse: %v", err)
			}
			var ok bool
			if pub, ok = k.(*rsa.PublicKey); !ok {
				return nil, errf("DataError", "the SPKI key is a %T, not an RSA key", k)
			}
		case "pkcs8":
			k, err := x509.ParsePKCS8PrivateKey(data)
			if err != nil {
				return nil, errf("DataError", "the PKCS #8 key does not parse: %v", err)
			}
			var ok bool
			if priv, ok = k.(*rsa.PrivateKey); !ok {
				return nil, errf("DataError", "the PKCS #8 key is a %T, not an RSA key", k)
			}
		case "jwk":
			var err error
			if pub, priv, err = rsaFromJWK(jwk); err != nil {
				return nil, err
			}
		default:
			return nil, errf("NotSupportedError", "an RSA key is imported as spki, pkcs8 or jwk, not %s", format)
		}
		if priv != nil {
			pub = &priv.PublicKey
		}
		out := &key{JWK: rsaJWK(pub, priv), Type: "public", Alg: Alg{Name: alg.Name, Hash: alg.Hash, ModulusLength: pub.N.BitLen(), PublicExponent: big.NewInt(int64(pub.E)).Bytes()}}
		if priv != nil {
			out.Type = "private"
		}
		return out, nil
	case alg.Name == "ECDSA":
		curve, err := curveOf(alg.NamedCurve)
		if err != nil {
			return nil, err
		}
		var pub *ecdsa.PublicKey
		var priv *ecdsa.PrivateKey
		switch format {
		case "raw":
			if pub, err = ecdsa.ParseUncompressedPublicKey(curve, data); err != nil {
				return nil, errf("DataError", "the raw key is not an uncompressed %s point: %v", alg.NamedCurve, err)
			}
		case "spki":
			k, err := x509.ParsePKIXPublicKey(data)
			if err != nil {
				return nil, errf("DataError", "the SPKI key does not parse: %v", err)
			}
			var ok bool
			if pub, ok = k.(*ecdsa.PublicKey); !ok {
				return nil, errf("DataError", "the SPKI key is a %T, not an EC key", k)
			}
		case "pkcs8":
			k, err := x509.ParsePKCS8PrivateKey(data)
			if err != nil {
				return nil, errf("DataError", "the PKCS #8 key does not parse: %v", err)
			}
			var ok bool
			if priv, ok = k.(*ecdsa.PrivateKey); !ok {
				return nil, errf("DataError", "the PKCS #8 key is a %T, not an EC key", k)
			}
			pub = &priv.PublicKey
		case "jwk":
			if pub, priv, err = ecFromJWK(jwk, curve, alg.NamedCurve); err != nil {
				return nil, err
			}
		default:
			return nil, errf("NotSupportedError", "an ECDSA key is imported as raw, spki, pkcs8 or jwk, not %s", format)
		}
		if pub.Curve != curve {
			return nil, errf("DataError", "the key is on %s, not %s", pub.Curve.Params().Name, alg.NamedCurve)
		}
		out := &key{JWK: ecJWK(pub, priv, alg.NamedCurve), Type: "public", Alg: Alg{Name: "ECDSA", NamedCurve: alg.NamedCurve}}
		if priv != nil {
			out.Type = "private"
		}
		return out, nil
	case alg.Name == "Ed25519":
		var pub ed25519.PublicKey
		var priv ed25519.PrivateKey
		switch format {
		case "raw":
			if len(data) != ed25519.PublicKeySize {
				return nil, errf("DataError", "a raw Ed25519 key is 32 bytes, not %d", len(data))
			}
			pub = ed25519.PublicKey(bytes.Clone(data))
		case "spki":
			k, err := x509.ParsePKIXPublicKey(data)
			if err != nil {
				return nil, errf("DataError", "the SPKI key does not parse: %v", err)
			}
			var ok bool
			if pub, ok = k.(ed25519.PublicKey); !ok {
				return nil, errf("DataError", "the SPKI key is a %T, not an Ed25519 key", k)
			}
		case "pkcs8":
			k, err := x509.ParsePKCS8PrivateKey(data)
			if err != nil {
				return nil, errf("DataError", "the PKCS #8 key does not parse: %v", err)
			}
			var ok bool
			if priv, ok = k.(ed25519.PrivateKey); !ok {
				return nil, errf("DataError", "the PKCS #8 key is a %T, not an Ed25519 key", k)
			}
			pub = priv.Public().(ed25519.PublicKey)
		case "jwk":
			var err error
			if pub, priv, err = edFromJWK(jwk); err != nil {
				return nil, err
			}
		default:
			return nil, errf("NotSupportedError", "an Ed25519 key is imported as raw, spki, pkcs8 or jwk, not %s", format)
		}
		j := &JWK{Kty: "OKP", Crv: "Ed25519", X: enc(pub)}
		out := &key{JWK: j, Type: "public", Alg: Alg{Name: "Ed25519"}}
		if priv != nil {
			j.D, out.Type = enc(priv.Seed()), "private"
		}
		return out, nil
	}
	return nil, errf("NotSupportedError", "the algorithm %q is not supported: HMAC, AES-GCM, RSASSA-PKCS1-v1_5, RSA-PSS, ECDSA, Ed25519, HKDF and PBKDF2 are", alg.Name)
}

func rsaFromJWK(j *JWK) (*rsa.PublicKey, *rsa.PrivateKey, error) {
	if j == nil || j.Kty != "RSA" {
		return nil, nil, errf("DataError", "an RSA key in JWK form must have kty \"RSA\"")
	}
	n, err := decInt("n", j.N)
	if err != nil {
		return nil, nil, err
	}
	e, err := decInt("e", j.E)
	if err != nil {
		return nil, nil, err
	}
	if !e.IsInt64() || e.Int64() > 1<<31-1 {
		return nil, nil, errf("DataError", "the RSA public exponent is too large")
	}
	pub := &rsa.PublicKey{N: n, E: int(e.Int64())}
	if j.D == "" {
		return pub, nil, nil
	}
	priv := &rsa.PrivateKey{PublicKey: *pub}
	if priv.D, err = decInt("d", j.D); err != nil {
		return nil, nil, err
	}
	if j.P != "" && j.Q != "" {
		p, err := decInt("p", j.P)
		if err != nil {
			return nil, nil, err
		}
		q, err := decInt("q", j.Q)
		if err != nil {
			return nil, nil, err
		}
		priv.Primes = []*big.Int{p, q}
	}
	if err := priv.Validate(); err != nil {
		return nil, nil, errf("DataError", "the RSA private key is not valid: %v", err)
	}
	priv.Precompute()
	return &priv.PublicKey, priv, nil
}

func rsaJWK(pub *rsa.PublicKey, priv *rsa.PrivateKey) *JWK {
	j := &JWK{Kty: "RSA", N: enc(pub.N.Bytes()), E: enc(big.NewInt(int64(pub.E)).Bytes())}
	if priv != nil {
		j.D = enc(priv.D.Bytes())
		if len(priv.Primes) == 2 {
			j.P, j.Q = enc(priv.Primes[0].Bytes()), enc(priv.Primes[1].Bytes())
			j.DP, j.DQ, j.QI = enc(priv.Precomputed.Dp.Bytes()), enc(priv.Precomputed.Dq.Bytes()), enc(priv.Precomputed.Qinv.Bytes())
		}
	}
	return j
}

func ecFromJWK(j *JWK, curve elliptic.Curve, name string) (*ecdsa.PublicKey, *ecdsa.PrivateKey, error) {
	if j == nil || j.Kty != "EC" {
		return nil, nil, errf("DataError", "an EC key in JWK form must have kty \"EC\"")
	}
	if j.Crv != name {
		return nil, nil, errf("DataError", "the JWK's curve is %q, not %q", j.Crv, name)
	}
	size := (curve.Params().BitSize + 7) / 8
	x, err := dec("x", j.X)
	if err != nil {
		return nil, nil, err
	}
	y, err := dec("y", j.Y)
	if err != nil {
		return nil, nil, err
	}
	if len(x) != size || len(y) != size {
		return nil, nil, errf("DataError", "the JWK's x and y must be %d bytes each for %s", size, name)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, nil, errf("DataError", "the JWK's point is not on %s: %v", name, err)
	}
	if j.D == "" {
		return pub, nil, nil
	}
	d, err := dec("d", j.D)
	if err != nil {
		return nil, nil, err
	}
	priv, err := ecdsa.ParseRawPrivateKey(curve, d)
	if err != nil {
		return nil, nil, errf("DataError", "the JWK's private key is not valid: %v", err)
	}
	if !priv.PublicKey.Equal(pub) {
		return nil, nil, errf("DataError", "the JWK's d does not match its x and y")
	}
	return pub, priv, nil
}

func ecJWK(pub *ecdsa.PublicKey, priv *ecdsa.PrivateKey, name string) *JWK {
	b, _ := pub.Bytes()
	size := (len(b) - 1) / 2
	j := &JWK{Kty: "EC", Crv: name, X: enc(b[1 : 1+size]), Y: enc(b[1+size:])}
	if priv != nil {
		d, _ := priv.Bytes()
		j.D = enc(d)
	}
	return j
}

func edFromJWK(j *JWK) (ed25519.PublicKey, ed25519.PrivateKey, error) {
	if j == nil || j.Kty != "OKP" || j.Crv != "Ed25519" {
		return nil, nil, errf("DataError", "an Ed25519 key in JWK form must have kty \"OKP\" and crv \"Ed25519\"")
	}
	x, err := dec("x", j.X)
	if err != nil {
		return nil, nil, err
	}
	if len(x) != ed25519.PublicKeySize {
		return nil, nil, errf("DataError", "the JWK's x must be 32 bytes")
	}
	if j.D == "" {
		return ed25519.PublicKey(x), nil, nil
	}
	d, err := dec("d", j.D)
	if err != nil {
		return nil, nil, err
	}
	if len(d) != ed25519.SeedSize {
		return nil, nil, errf("DataError", "the JWK's d must be 32 bytes")
	}
	priv := ed25519.NewKeyFromSeed(d)
	if !bytes.Equal(priv.Public().(ed25519.PublicKey), x) {
		return nil, nil, errf("DataError", "the JWK's d does not match its x")
	}
	return ed25519.PublicKey(x), priv, nil
}

func exportKey(format, algName string, j *JWK) (any, error) {
	if j == nil {
		return nil, errf("InvalidAccessError", "no key")
	}
	if format == "jwk" {
		return map[string]*JWK{"jwk": j}, nil
	}
	var out []byte
	var err error
	switch j.Kty {
	case "oct":
		if format != "raw" {
			return nil, errf("NotSupportedError", "a secret key is exported as raw or jwk, not %s", format)
		}
		out, err = dec("k", j.K)
	case "RSA":
		pub, priv, e := rsaFromJWK(j)
		if e != nil {
			return nil, e
		}
		switch {
		case format == "spki" && priv == nil:
			out, err = x509.MarshalPKIXPublicKey(pub)
		case format == "pkcs8" && priv != nil:
			out, err = x509.MarshalPKCS8PrivateKey(priv)
		default:
			return nil, errf("InvalidAccessError", "an RSA %s key is not exported as %s", keyType(priv != nil), format)
		}
	case "EC":
		curve, e := curveOf(j.Crv)
		if e != nil {
			return nil, e
		}
		pub, priv, e := ecFromJWK(j, curve, j.Crv)
		if e != nil {
			return nil, e
		}
		switch {
		case format == "raw" && priv == nil:
			out, err = pub.Bytes()
		case format == "spki" && priv == nil:
			out, err = x509.MarshalPKIXPublicKey(pub)
		case format == "pkcs8" && priv != nil:
			out, err = x509.MarshalPKCS8PrivateKey(priv)
		default:
			return nil, errf("InvalidAccessError", "an EC %s key is not exported as %s", keyType(priv != nil), format)
		}
	case "OKP":
		pub, priv, e := edFromJWK(j)
		if e != nil {
			return nil, e
		}
		switch {
		case format == "raw" && priv == nil:
			out = pub
		case format == "spki" && priv == nil:
			out, err = x509.MarshalPKIXPublicKey(pub)
		case format == "pkcs8" && priv != nil:
			out, err = x509.MarshalPKCS8PrivateKey(priv)
		default:
			return nil, errf("InvalidAccessError", "an Ed25519 %s key is not exported as %s", keyType(priv != nil), format)
		}
	default:
		return nil, errf("DataError", "a key of kty %q cannot be exported", j.Kty)
	}
	if err != nil {
		if _, ok := err.(*Error); ok {
			return nil, err
		}
		return nil, errf("OperationError", "exporting the key: %v", err)
	}
	return map[string][]byte{"data": out}, nil
}

func keyType(private bool) string {
	if private {
		return "private"
	}
	return "public"
}

func generate(alg Alg) (any, error) {
	switch {
	case alg.Name == "HMAC" || alg.Name == "AES-GCM":
		n := alg.Length
		if alg.Name == "HMAC" {
			h, err := hashOf(alg.Hash, false)
			if err != nil {
				return nil, err
			}
			if n == 0 {
				n = h.New().BlockSize() * 8
			}
		} else if n != 128 && n != 192 && n != 256 {
			return nil, errf("OperationError", "an AES key is 128, 192 or 256 bits, not %d", n)
		}
		if n <= 0 || n%8 != 0 {
			return nil, errf("OperationError", "the key length %d is not a positive multiple of 8", n)
		}
		return importKey("raw", alg, randomBytes(n/8), nil)
	case isRSA(alg.Name):
		if alg.ModulusLength < 2048 || alg.ModulusLength > maxModulusLength {
			return nil, errf("OperationError", "the modulus length is %d: %d to %d bits are generated here", alg.ModulusLength, 2048, maxModulusLength)
		}
		if e := new(big.Int).SetBytes(alg.PublicExponent); len(alg.PublicExponent) > 0 && e.Cmp(big.NewInt(65537)) != 0 {
			return nil, errf("OperationError", "the public exponent must be 65537")
		}
		priv, err := rsa.GenerateKey(rand.Reader, alg.ModulusLength)
		if err != nil {
			return nil, errf("OperationError", "generating the RSA key: %v", err)
		}
		return pair(alg, rsaJWK(&priv.PublicKey, nil), rsaJWK(&priv.PublicKey, priv))
	case alg.Name == "ECDSA":
		curve, err := curveOf(alg.NamedCurve)
		if err != nil {
			return nil, err
		}
		priv, err := ecdsa.GenerateKey(curve, rand.Reader)
		if err != nil {
			return nil, errf("OperationError", "generating the EC key: %v", err)
		}
		return pair(alg, ecJWK(&priv.PublicKey, nil, alg.NamedCurve), ecJWK(&priv.PublicKey, priv, alg.NamedCurve))
	case alg.Name == "Ed25519":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, errf("OperationError", "generating the Ed25519 key: %v", err)
		}
		return pair(alg, &JWK{Kty: "OKP", Crv: "Ed25519", X: enc(pub)}, &JWK{Kty: "OKP", Crv: "Ed25519", X: enc(pub), D: enc(priv.Seed())})
	}
	return nil, errf("NotSupportedError", "generating %q keys is not supported: HMAC, AES-GCM, RSASSA-PKCS1-v1_5, RSA-PSS, ECDSA and Ed25519 are", alg.Name)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func pair(alg Alg, pub, priv *JWK) (any, error) {
	p, err := importKey("jwk", alg, nil, pub)
	if err != nil {
		return nil, err
	}
	s, err := importKey("jwk", alg, nil, priv)
	if err != nil {
		return nil, err
	}
	return map[string]*key{"publicKey": p, "privateKey": s}, nil
}

// ---- signatures ---------------------------------------------------------------------------------

func digest(name string, data []byte) (crypto.Hash, []byte, error) {
	h, err := hashOf(name, false)
	if err != nil {
		return 0, nil, err
	}
	d := h.New()
	d.Write(data)
	return h, d.Sum(nil), nil
}

func sign(alg, keyAlg Alg, j *JWK, data []byte) ([]byte, error) {
	if alg.Name != keyAlg.Name {
		return nil, errf("InvalidAccessError", "the key is a %s key, not %s", keyAlg.Name, alg.Name)
	}
	switch alg.Name {
	case "HMAC":
		if j == nil || j.Kty != "oct" {
			return nil, errf("InvalidAccessError", "an HMAC key must be a secret key")
		}
		k, err := dec("k", j.K)
		if err != nil {
			return nil, err
		}
		h, err := hashOf(keyAlg.Hash, false)
		if err != nil {
			return nil, err
		}
		m := hmac.New(h.New, k)
		m.Write(data)
		return m.Sum(nil), nil
	case "RSASSA-PKCS1-v1_5", "RSA-PSS":
		_, priv, err := rsaFromJWK(j)
		if err != nil {
			return nil, err
		}
		if priv == nil {
			return nil, errf("InvalidAccessError", "signing needs the private key")
		}
		h, sum, err := digest(keyAlg.Hash, data)
		if err != nil {
			return nil, err
		}
		var sig []byte
		if alg.Name == "RSA-PSS" {
			sig, err = rsa.SignPSS(rand.Reader, priv, h, sum, &rsa.PSSOptions{SaltLength: saltLength(alg), Hash: h})
		} else {
			sig, err = rsa.SignPKCS1v15(nil, priv, h, sum)
		}
		if err != nil {
			return nil, errf("OperationError", "signing: %v", err)
		}
		return sig, nil
	case "ECDSA":
		curve, err := curveOf(keyAlg.NamedCurve)
		if err != nil {
			return nil, err
		}
		_, priv, err := ecFromJWK(j, curve, keyAlg.NamedCurve)
		if err != nil {
			return nil, err
		}
		if priv == nil {
			return nil, errf("InvalidAccessError", "signing needs the private key")
		}
		_, sum, err := digest(alg.Hash, data)
		if err != nil {
			return nil, err
		}
		r, s, err := ecdsa.Sign(rand.Reader, priv, sum)
		if err != nil {
			return nil, errf("OperationError", "signing: %v", err)
		}
		size := (curve.Params().BitSize + 7) / 8
		sig := make([]byte, 2*size)
		r.FillBytes(sig[:size])
		s.FillBytes(sig[size:])
		return sig, nil
	case "Ed25519":
		_, priv, err := edFromJWK(j)
		if err != nil {
			return nil, err
		}
		if priv == nil {
			return nil, errf("InvalidAccessError", "signing needs the private key")
		}
		return ed25519.Sign(priv, data), nil
	}
	return nil, errf("NotSupportedError", "signing with %q is not supported: HMAC, RSASSA-PKCS1-v1_5, RSA-PSS, ECDSA and Ed25519 are", alg.Name)
}

func saltLength(alg Alg) int {
	if alg.SaltLength == nil {
		return rsa.PSSSaltLengthEqualsHash
	}
	return *alg.SaltLength
}

func verify(alg, keyAlg Alg, j *JWK, sig, data []byte) (bool, error) {
	if alg.Name != keyAlg.Name {
		return false, errf("InvalidAccessError", "the key is a %s key, not %s", keyAlg.Name, alg.Name)
	}
	switch alg.Name {
	case "HMAC":
		want, err := sign(alg, keyAlg, j, data)
		if err != nil {
			return false, err
		}
		return hmac.Equal(want, sig), nil
	case "RSASSA-PKCS1-v1_5", "RSA-PSS":
		pub, _, err := rsaFromJWK(j)
		if err != nil {
			return false, err
		}
		h, sum, err := digest(keyAlg.Hash, data)
		if err != nil {
			return false, err
		}
		if alg.Name == "RSA-PSS" {
			return rsa.VerifyPSS(pub, h, sum, sig, &rsa.PSSOptions{SaltLength: saltLength(alg), Hash: h}) == nil, nil
		}
		return rsa.VerifyPKCS1v15(pub, h, sum, sig) == nil, nil
	case "ECDSA":
		curve, err := curveOf(keyAlg.NamedCurve)
		if err != nil {
			return false, err
		}
		pub, _, err := ecFromJWK(j, curve, keyAlg.NamedCurve)
		if err != nil {
			return false, err
		}
		_, sum, err := digest(alg.Hash, data)
		if err != nil {
			return false, err
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return false, nil
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		return ecdsa.Verify(pub, sum, r, s), nil
	case "Ed25519":
		pub, _, err := edFromJWK(j)
		if err != nil {
			return false, err
		}
		return len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, data, sig), nil
	}
	return false, errf("NotSupportedError", "verifying with %q is not supported: HMAC, RSASSA-PKCS1-v1_5, RSA-PSS, ECDSA and Ed25519 are", alg.Name)
}

// ---- encryption and derivation ------------------------------------------------------------------

func aesGCM(encrypt bool, alg, keyAlg Alg, j *JWK, data []byte) ([]byte, error) {
	if alg.Name != "AES-GCM" || keyAlg.Name != "AES-GCM" {
		return nil, errf("NotSupportedError", "only AES-GCM encrypts here (the key is %s, the algorithm %s)", keyAlg.Name, alg.Name)
	}
	if j == nil || j.Kty != "oct" {
		return nil, errf("InvalidAccessError", "an AES key must be a secret key")
	}
	k, err := dec("k", j.K)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, errf("DataError", "the AES key: %v", err)
	}
	tag := alg.TagLength
	if tag == 0 {
		tag = 128
	}
	if len(alg.IV) == 0 {
		return nil, errf("OperationError", "AES-GCM needs an iv")
	}
	var aead cipher.AEAD
	switch {
	case len(alg.IV) == 12 && tag == 128:
		aead, err = cipher.NewGCM(block)
	case tag == 128:
		aead, err = cipher.NewGCMWithNonceSize(block, len(alg.IV))
	case len(alg.IV) == 12 && tag >= 96 && tag <= 128 && tag%8 == 0:
		aead, err = cipher.NewGCMWithTagSize(block, tag/8)
	default:
		return nil, errf("OperationError", "AES-GCM with a %d-byte iv and a %d-bit tag is not supported (a 12-byte iv takes 96 to 128 bits)", len(alg.IV), tag)
	}
	if err != nil {
		return nil, errf("OperationError", "AES-GCM: %v", err)
	}
	if encrypt {
		return aead.Seal(nil, alg.IV, data, alg.AdditionalData), nil
	}
	out, err := aead.Open(nil, alg.IV, data, alg.AdditionalData)
	if err != nil {
		return nil, errf("OperationError", "decryption failed: the data, iv, additionalData or key is not the one it was encrypted with")
	}
	return out, nil
}

func deriveBits(alg Alg, j *JWK, length *int) ([]byte, error) {
	if length == nil || *length <= 0 || *length%8 != 0 {
		return nil, errf("OperationError", "the length must be a positive multiple of 8 bits")
	}
	if j == nil || j.Kty != "oct" {
		return nil, errf("InvalidAccessError", "%s derives from a secret key", alg.Name)
	}
	secret, err := dec("k", j.K)
	if err != nil {
		return nil, err
	}
	h, err := hashOf(alg.Hash, false)
	if err != nil {
		return nil, err
	}
	switch alg.Name {
	case "HKDF":
		out, err := hkdf.Key(h.New, secret, alg.Salt, string(alg.Info), *length/8)
		if err != nil {
			return nil, errf("OperationError", "HKDF: %v", err)
		}
		return out, nil
	case "PBKDF2":
		if alg.Iterations <= 0 || alg.Iterations > maxIterations {
			return nil, errf("OperationError", "PBKDF2 takes 1 to %d iterations, not %d (the host computes them, outside the step's fuel)", maxIterations, alg.Iterations)
		}
		out, err := pbkdf2.Key(h.New, string(secret), alg.Salt, alg.Iterations, *length/8)
		if err != nil {
			return nil, errf("OperationError", "PBKDF2: %v", err)
		}
		return out, nil
	}
	return nil, errf("NotSupportedError", "deriving bits with %q is not supported: HKDF and PBKDF2 are", alg.Name)
}
