package httpcap

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	for _, tc := range []struct {
		in       string
		host     string
		port     string
		wantErr  string // part of the error; "" for a valid entry
		isAddres bool
	}{
		{in: "api.stripe.com", host: "api.stripe.com"},
		{in: "API.Stripe.COM", host: "api.stripe.com"},
		{in: "*.example.com:8443", host: "*.example.com", port: "8443"},
		{in: "127.0.0.1:8080", host: "127.0.0.1", port: "8080", isAddres: true},
		{in: "[::1]:8080", host: "::1", port: "8080", isAddres: true},
		{in: "[::ffff:10.0.0.1]", host: "10.0.0.1", isAddres: true},
		{in: "[fd00:ec2::254]", host: "fd00:ec2::254", isAddres: true},
		{in: "api.example.com:*", host: "api.example.com", port: "*"},
		{in: "*", host: "*"},
		{in: "my_service.internal", host: "my_service.internal"},
		{in: "", wantErr: "empty"},
		{in: "https://api.example.com/v1", wantErr: `has a scheme: write only host[:port], like "api.example.com"`},
		{in: "api.example.com/v1", wantErr: "leave out paths"},
		{in: "user@api.example.com", wantErr: "credentials"},
		{in: "api.example.com:", wantErr: "ends with a colon"},
		{in: "api.example.com:0", wantErr: "port must be a number from 1 to 65535"},
		{in: "api.example.com:65536", wantErr: "port must be"},
		{in: "api.example.com:080", wantErr: "port must be"},
		{in: "api.example.com:http", wantErr: "port must be"},
		{in: "::1", wantErr: "write an IPv6 address in brackets, like [::1]:443"},
		{in: "[::1", wantErr: "missing ]"},
		{in: "[127.0.0.1]:80", wantErr: "not an IPv6 address"},
		{in: "[fe80::1%eth0]", wantErr: "not an IPv6 address"},
		{in: "[::1]8080", wantErr: "write [address]:port"},
		{in: "api.*.com", wantErr: "a wildcard may only be the first label"},
		{in: "*example.com", wantErr: "a wildcard may only be the first label"},
		{in: "bücher.example", wantErr: "punycode"},
		{in: "a..b", wantErr: "empty or over-long label"},
		{in: strings.Repeat("a", 64) + ".com", wantErr: "over-long label"},
		{in: "exa!mple.com", wantErr: `contains '!'`},
	} {
		p, err := ParsePattern(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePattern(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePattern(%q): %v", tc.in, err)
			continue
		}
		if p.host != tc.host || p.port != tc.port || p.addr.IsValid() != tc.isAddres || p.String() != tc.in {
			t.Errorf("ParsePattern(%q) = host %q port %q address %v text %q; want %q %q %v", tc.in, p.host, p.port, p.addr.IsValid(), p, tc.host, tc.port, tc.isAddres)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	name := func(host string, port, def int) target { return target{host: host, port: port, defaultPort: def} }
	addr := func(a string, port, def int) target {
		ip := netip.MustParseAddr(a).Unmap()
		return target{host: ip.String(), addr: ip, port: port, defaultPort: def}
	}
	for _, tc := range []struct {
		pattern string
		t       target
		want    bool
	}{
		{"api.example.com", name("api.example.com", 443, 443), true},
		{"api.example.com", name("api.example.com", 80, 80), true},
		{"api.example.com", name("api.example.com", 8443, 443), false}, // no port: the scheme's default only
		{"api.example.com", name("api.example.com", 443, 80), false},   // http on 443 is not http's default
		{"api.example.com", name("other.example.com", 443, 443), false},
		{"api.example.com", name("xapi.example.com", 443, 443), false},
		{"api.example.com:8443", name("api.example.com", 8443, 443), true},
		{"api.example.com:8443", name("api.example.com", 443, 443), false},
		{"api.example.com:*", name("api.example.com", 1234, 80), true},
		{"*.example.com", name("a.example.com", 443, 443), true},
		{"*.example.com", name("a.b.example.com", 443, 443), true},
		{"*.example.com", name("example.com", 443, 443), false},
		{"*.example.com", name("badexample.com", 443, 443), false},
		{"*.example.com:8443", name("a.example.com", 443, 443), false},
		{"*", name("anything.test", 443, 443), true},
		{"*", addr("93.184.216.34", 80, 80), true},
		{"*", name("anything.test", 8080, 80), false},
		{"*:*", name("anything.test", 8080, 80), true},
		{"127.0.0.1:8080", addr("127.0.0.1", 8080, 80), true},
		{"127.0.0.1:8080", addr("::ffff:127.0.0.1", 8080, 80), true}, // the mapped form is the same address
		{"127.0.0.1:8080", name("localhost", 8080, 80), false},       // a name is not the address
		{"127.0.0.1:8080", addr("127.0.0.2", 8080, 80), false},
		{"[::1]:8080", addr("::1", 8080, 80), true},
		{"[::1]:8080", addr("127.0.0.1", 8080, 80), false},
		{"*.example.com", addr("10.0.0.1", 443, 443), false},
	} {
		p, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.match(tc.t); got != tc.want {
			t.Errorf("%q matches %s (default port %d): %v, want %v", tc.pattern, tc.t, tc.t.defaultPort, got, tc.want)
		}
	}
}

func TestPatternNamesAddress(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		addr    string
		port    int
		want    bool
	}{
		{"127.0.0.1:8080", "127.0.0.1", 8080, true},
		{"127.0.0.1:8080", "127.0.0.1", 8081, false},
		{"127.0.0.1", "127.0.0.1", 80, true},
		{"127.0.0.1", "127.0.0.1", 443, true},
		{"127.0.0.1", "127.0.0.1", 8080, false},
		{"127.0.0.1:*", "127.0.0.1", 5432, true},
		{"[fd00:ec2::254]", "fd00:ec2::254", 80, true},
		{"localhost:8080", "127.0.0.1", 8080, false}, // a name never names an address
		{"*", "169.254.169.254", 80, false},
		{"*.internal", "10.0.0.1", 443, false},
	} {
		p, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.namesAddress(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("%q names %s port %d: %v, want %v", tc.pattern, tc.addr, tc.port, got, tc.want)
		}
	}
}
