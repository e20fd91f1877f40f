package httpcap

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want Class
	}{
		// Ordinary public addresses.
		{"93.184.216.34", Public},
		{"1.1.1.1", Public},
		{"8.8.8.8", Public},
		{"2606:4700:4700::1111", Public},
		{"2a00:1450:4001:82b::200e", Public},
		{"172.32.0.1", Public}, // just past 172.16.0.0/12
		{"100.128.0.1", Public},
		{"11.0.0.1", Public},

		// IPv4 special ranges.
		{"127.0.0.1", Loopback},
		{"127.255.255.254", Loopback},
		{"10.0.0.1", Private},
		{"172.16.0.1", Private},
		{"172.31.255.255", Private},
		{"192.168.1.1", Private},
		{"169.254.1.1", LinkLocal},
		{"169.254.169.254", CloudMetadata},
		{"169.254.170.2", CloudMetadata},
		{"100.100.100.200", CloudMetadata},
		{"192.0.0.192", CloudMetadata},
		{"100.64.0.1", SharedNAT},
		{"0.0.0.0", Unspecified},
		{"0.1.2.3", Unspecified},
		{"224.0.0.1", Multicast},
		{"239.255.255.250", Multicast},
		{"255.255.255.255", Reserved},
		{"240.0.0.1", Reserved},
		{"192.0.0.8", Reserved},
		{"198.18.0.1", Reserved},
		{"192.0.2.1", Documentation},
		{"198.51.100.1", Documentation},
		{"203.0.113.1", Documentation},

		// IPv6 special ranges.
		{"::1", Loopback},
		{"::", Unspecified},
		{"fe80::1", LinkLocal},
		{"fc00::1", Private},
		{"fd12:3456::1", Private},
		{"fd00:ec2::254", CloudMetadata},
		{"fec0::1", Private},
		{"ff02::1", Multicast},
		{"2001:db8::1", Documentation},
		{"2001::1", Reserved}, // Teredo
		{"::a00:1", Reserved}, // IPv4-compatible ::10.0.0.1 (deprecated)
		{"100::1", Reserved},  // discard
		{"4000::1", Reserved}, // outside global unicast
		{"64:ff9b:1::1", Reserved},

		// Addresses that carry an IPv4 address are that address.
		{"::ffff:127.0.0.1", Loopback},
		{"::ffff:10.1.2.3", Private},
		{"::ffff:169.254.169.254", CloudMetadata},
		{"::ffff:93.184.216.34", Public},
		{"64:ff9b::7f00:1", Loopback},         // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", CloudMetadata}, // NAT64 of 169.254.169.254
		{"64:ff9b::5db8:d822", Public},        // NAT64 of 93.184.216.34
		{"2002:7f00:1::1", Loopback},          // 6to4 of 127.0.0.1
		{"2002:c0a8:101::1", Private},         // 6to4 of 192.168.1.1
		{"2002:5db8:d822::1", Public},
	} {
		if got := Classify(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Classify(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
