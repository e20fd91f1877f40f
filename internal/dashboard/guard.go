package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
)

// guard checks every request before any handler sees it (below BasePath: it sees paths
// with the base stripped), and sets the headers every response carries.
//
//   - With a token: the request must carry it, as ?token= (answered with a session cookie
//     and a redirect that drops it from the address bar), as the cookie, or as an
//     Authorization: Bearer header. Anything else gets 401 and no data.
//   - Without one (loopback only): the Host header must name a loopback host, so a web page
//     elsewhere cannot read the dashboard by pointing its own domain at 127.0.0.1 (DNS
//     rebinding).
//
// Actions (POSTs) also check checkPost: where the browser says the form came from, and the
// form's CSRF value.
type guard struct {
	token   string
	session string // cookie value: derived from the token, not the token itself
	csrf    string
	base    string // Config.BasePath: the session cookie's path and the redirects' prefix
	log     *slog.Logger
	// sameSite refuses what a browser says came from another site (Sec-Fetch-Site), or,
	// from a browser too old to say, an Origin other than the Host.
	sameSite *http.CrossOriginProtection
}

const sessionCookie = "pgflow_wasm_ui"

func newGuard(token string, secret []byte, base string, log *slog.Logger) *guard {
	g := &guard{token: token, base: base, csrf: mac(secret, "csrf"), log: log, sameSite: http.NewCrossOriginProtection()}
	if token != "" {
		g.session = mac([]byte(token), "pgflow-wasm dashboard session")
	}
	return g
}

func mac(key []byte, msg string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return hex.EncodeToString(h.Sum(nil))
}

// equal compares secrets in constant time (hashing first hides their lengths too).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: under no-referrer a browser posts the dashboard's own
		// forms with "Origin: null", which an older browser (no Sec-Fetch-Site) would then be
		// refused for; other sites still get no referrer.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		// Static files (style sheet, script) hold no data: the token page needs its style.
		if !strings.HasPrefix(r.URL.Path, "/static/") && !g.allowed(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowed answers the request itself (401, 403 or a redirect) and returns false unless the
// handler may run.
func (g *guard) allowed(w http.ResponseWriter, r *http.Request) bool {
	if g.token == "" {
		if !loopbackHost(r.Host) {
			http.Error(w, "refused: this dashboard answers only to localhost, 127.0.0.1 or [::1] (it has no token)", http.StatusForbidden)
			return false
		}
		return true
	}
	if t := r.URL.Query().Get("token"); t != "" {
		if !equal(t, g.token) {
			g.unauthorized(w, "the token in the address is wrong")
			return false
		}
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: g.session, Path: g.base + "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
		if r.Method != http.MethodGet {
			return true
		}
		u := *r.URL
		q := u.Query()
		q.Del("token")
		u.RawQuery = q.Encode()
		http.Redirect(w, r, g.base+u.RequestURI(), http.StatusSeeOther)
		return false
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		bearer, ok := strings.CutPrefix(auth, "Bearer ")
		if ok && equal(strings.TrimSpace(bearer), g.token) {
			return true
		}
		g.unauthorized(w, "the Authorization header does not carry the dashboard's token")
		return false
	}
	if c, err := r.Cookie(sessionCookie); err == nil && equal(c.Value, g.session) {
		return true
	}
	g.unauthorized(w, "this dashboard needs its token")
	return false
}

// unauthorized answers 401 with a page that explains how to get in and shows nothing else.
func (g *guard) unauthorized(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	_ = unauthorizedPage.Execute(w, struct{ Why, Base, Asset string }{why, g.base, assetVersion})
}

// checkPost refuses (403, logged) a POST that did not come from the dashboard's own form.
func (g *guard) checkPost(w http.ResponseWriter, r *http.Request) bool {
	why := g.notOwnForm(r)
	if why == "" {
		return true
	}
	g.log.Warn("dashboard action refused", "path", r.URL.Path, "reason", why, "remote", r.RemoteAddr)
	back, backText := "/workers", "Back to the workers"
	switch r.URL.Path {
	case "/actions/start":
		back, backText = "/flows", "Back to the flows"
	case "/actions/cancel", "/actions/rerun":
		back, backText = "/runs", "Back to the runs"
	}
	writeNotice(w, g.base, notice{Status: http.StatusForbidden, Title: "Refused",
		Message: "This form did not come from the dashboard's own page: " + why + ". Reload the page and try again.",
		Back:    back, BackText: backText})
	return false
}

// notOwnForm says why a POST is not one of the dashboard's own forms, "" when it is: the
// browser must not say it came from another site, and the form must carry the CSRF value
// that only the dashboard's pages hold (a script without a browser has to read a page first).
func (g *guard) notOwnForm(r *http.Request) string {
	if err := g.sameSite.Check(r); err != nil {
		return fmt.Sprintf("%v (Sec-Fetch-Site %q, Origin %q, Host %q)", err,
			clip(r.Header.Get("Sec-Fetch-Site")), clip(r.Header.Get("Origin")), clip(r.Host))
	}
	if !equal(r.PostFormValue("csrf"), g.csrf) {
		return "its csrf value is missing or not this dashboard's (a page from before the dashboard restarted?)"
	}
	return ""
}

// clip shortens a header value for a log line or a page.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// loopbackHost reports whether a Host header names this machine's loopback interface.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
