// Package httpcap is the outbound HTTP capability of step handlers: the policy a step
// grants in flows.yaml (`http.allow` host[:port] patterns, size caps, requests per task)
// and the client that enforces it. Every request and every redirect hop is checked
// against the allow-list; loopback, private, link-local, cloud-metadata and other special
// addresses are refused unless an allow entry names the address itself; a name is resolved
// once and the connection is made to the address that was checked. The sandbox serves the
// ABI's http_request with a Session of the step's Policy.
package httpcap

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Pattern is one http.allow entry: a host (a name, "*.suffix", "*", or an IP address)
// and an optional port ("" for the scheme's default, "*" for any).
type Pattern struct {
	host string     // lower-case name, "*", "*.suffix", or the address text
	addr netip.Addr // valid when the entry is an IP address
	port string     // "", "*" or a port number
	text string     // as written
}

// ParsePattern reads an allow entry: "api.example.com", "*.example.com:8443",
// "127.0.0.1:8080", "[::1]:8080", "api.example.com:*" or "*".
func ParsePattern(s string) (Pattern, error) {
	p := Pattern{text: s}
	if s == "" {
		return p, errors.New("an empty entry: write a host like api.example.com or 127.0.0.1:8080")
	}
	if i := strings.Index(s, "://"); i >= 0 {
		return p, fmt.Errorf("%q has a scheme: write only host[:port], like %q (both http and https are allowed)", s, strings.SplitN(s[i+3:], "/", 2)[0])
	}
	if strings.HasSuffix(s, ":") {
		return p, fmt.Errorf("%q ends with a colon: write a port after it, or leave both out", s)
	}
	if strings.ContainsAny(s, "/?#@ \t") {
		return p, fmt.Errorf("%q is not host[:port]: leave out paths, queries, credentials and spaces", s)
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return p, fmt.Errorf("%q: missing ] after the IPv6 address", s)
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return p, fmt.Errorf("%q: write [address]:port", s)
		}
		port = strings.TrimPrefix(port, ":")
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return p, fmt.Errorf("%q: %q in brackets is not an IPv6 address (without a zone)", s, host)
		}
		p.addr, p.host = a.Unmap(), a.Unmap().String()
	case strings.Count(s, ":") > 1:
		return p, fmt.Errorf("%q: write an IPv6 address in brackets, like [%s]:443", s, s)
	default:
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
		}
		if a, err := netip.ParseAddr(host); err == nil {
			p.addr, p.host = a, a.String()
		} else if err := p.setName(host); err != nil {
			return p, fmt.Errorf("%q: %w", s, err)
		}
	}
	if port != "" && port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return p, fmt.Errorf("%q: the port must be a number from 1 to 65535, or * for any port", s)
		}
	}
	p.port = port
	return p, nil
}

// setName validates a host name, "*" or "*.suffix" and stores it in lower case.
func (p *Pattern) setName(host string) error {
	if host == "*" {
		p.host = host
		return nil
	}
	name := strings.TrimPrefix(host, "*.")
	if strings.Contains(name, "*") {
		return errors.New("a wildcard may only be the first label (*.example.com) or the whole host (*)")
	}
	if err := checkName(name); err != nil {
		return err
	}
	p.host = strings.ToLower(host)
	return nil
}

// checkName accepts an ASCII host name: labels of letters, digits, - and _, each 1-63
// characters, at most 253 in all. A trailing dot is not allowed here (callers trim it).
func checkName(name string) error {
	if name == "" {
		return errors.New("the host is empty")
	}
	if len(name) > 253 {
		return errors.New("the host name is longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q has an empty or over-long label", name)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			case c >= 0x80:
				return fmt.Errorf("host %q is not ASCII: write it in its punycode form (xn--...)", name)
			default:
				return fmt.Errorf("host %q contains %q: host names have letters, digits, - and .", name, c)
			}
		}
	}
	return nil
}

// String is the entry as written in flows.yaml.
func (p Pattern) String() string { return p.text }

// match reports whether the entry covers host (lower-case name or address text, as
// normalised by target) on port; defaultPort is the URL scheme's.
func (p Pattern) match(t target) bool {
	switch p.port {
	case "*":
	case "":
		if t.port != t.defaultPort {
			return false
		}
	default:
		if p.port != strconv.Itoa(t.port) {
			return false
		}
	}
	switch {
	case p.host == "*":
		return true
	case p.addr.IsValid():
		return t.addr.IsValid() && t.addr == p.addr
	case strings.HasPrefix(p.host, "*."):
		return !t.addr.IsValid() && strings.HasSuffix(t.host, p.host[1:])
	}
	return !t.addr.IsValid() && t.host == p.host
}

// namesAddress reports whether the entry is the address a itself on port: the only way to
// reach a special address. An entry without a port names the default ports 80 and 443 (at
// the address check the scheme is no longer known; the URL check already applied it).
func (p Pattern) namesAddress(a netip.Addr, port int) bool {
	if !p.addr.IsValid() || p.addr != a {
		return false
	}
	switch p.port {
	case "*":
		return true
	case "":
		return port == 80 || port == 443
	}
	return p.port == strconv.Itoa(port)
}
